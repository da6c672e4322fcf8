package eval

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/bus"
)

// Names of the peers that are not a suite's agents.
const (
	gatewayID          = "bcp-gateway"
	reviewerID         = "reviewer"
	baselineController = "baseline-controller"
	baselineReader     = "baseline-reader"
	// baselineTopic is where the baseline Controller asks the baseline
	// Reader, with no gateway between them.
	baselineTopic = "baseline:read"
)

func controllerID(suite string) string { return suite + "-controller" }
func readerID(suite string) string     { return suite + "-reader" }

// maxAttempts is the gateway's --max-attempts: invalid answers a query
// takes before it fails. The adaptive Reader uses one on its attempt
// beyond the answer space.
const maxAttempts = 3

// The channels' query limits per session, in the definitions and in the
// attacker's simulation alike.
const (
	maxCat2Queries = 4
	maxCat3Queries = 1
)

// queryTTL is the gateway's --query-ttl; the timing channel's bound in
// the report is computed from it.
const queryTTL = time.Minute

// testbed is a bus on loopback with auth, and the credentials of every
// peer of the evaluation.
type testbed struct {
	url    string
	http   *http.Server
	server *bus.Server
	tokens map[string]string
}

// startBus starts a bus with docs/SECURITY.md's BCP shape for the
// suites' agents, the gateway's grant, a reviewer, and an unconstrained
// pair for the baseline.
func startBus(suites []*Suite, dir string) (*testbed, error) {
	tb := &testbed{tokens: map[string]string{}}
	var ids []auth.Identity
	identity := func(name string, grant auth.Grant) error {
		token, sum, err := auth.NewToken()
		if err != nil {
			return err
		}
		tb.tokens[name] = token
		grant.ClientIDs = []string{name}
		ids = append(ids, auth.Identity{Name: name, TokenSHA256: sum, Grant: grant})
		return nil
	}
	agentGrant := auth.Grant{Publish: auth.Rules{Allow: []string{"bcp:*"}}, Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}}}
	for _, s := range suites {
		for _, name := range []string{controllerID(s.Name), readerID(s.Name)} {
			if err := identity(name, agentGrant); err != nil {
				return nil, err
			}
		}
	}
	grants := map[string]auth.Grant{
		gatewayID: {Publish: auth.Rules{Allow: []string{"agent:*", "bcp:approval.requested.*", "alert:bcp.budget", "system:bcp.*"}},
			Subscribe: auth.Rules{Allow: []string{"bcp:*", "system:client.*"}}},
		reviewerID:         {Publish: auth.Rules{Allow: []string{"bcp:approval"}}, Subscribe: auth.Rules{Allow: []string{"bcp:approval.requested.{{clientId}}"}}},
		baselineController: {Publish: auth.Rules{Allow: []string{baselineTopic}}},
		baselineReader:     {Subscribe: auth.Rules{Allow: []string{baselineTopic}}},
	}
	for _, name := range []string{gatewayID, reviewerID, baselineController, baselineReader} {
		if err := identity(name, grants[name]); err != nil {
			return nil, err
		}
	}
	authn, err := auth.New(auth.Config{Identities: ids}, dir)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	srv, err := bus.New(&bus.Options{Auth: authn, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{}
	srv.ConfigureHTTP(hs)
	go func() { _ = hs.Serve(srv.Listener(l, nil)) }()
	tb.url, tb.http, tb.server = "ws://"+l.Addr().String()+"/", hs, srv
	return tb, nil
}

func (tb *testbed) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = tb.server.Shutdown(ctx)
	_ = tb.http.Close()
}

// writeDefinitions writes each suite's Controller and Reader as agent
// definitions and loads them as the gateway does.
func writeDefinitions(suites []*Suite, dir string) ([]*bcp.Definition, error) {
	for _, s := range suites {
		channel := func(peer, role string) string {
			return fmt.Sprintf("  - peer: %s\n    role: %s\n    max_category: %d\n    budget_bits: %g\n    max_cat2_queries: %d\n    max_cat3_queries: %d\n",
				peer, role, s.MaxCategory, s.BudgetBits, maxCat2Queries, maxCat3Queries)
		}
		files := map[string]string{
			controllerID(s.Name): "---\nname: " + controllerID(s.Name) + "\nbase_taint: low\nbcp_channels:\n" + channel(readerID(s.Name), "controller") + "---\nThe " + s.Name + " suite's Controller.\n",
			readerID(s.Name):     "---\nname: " + readerID(s.Name) + "\nbase_taint: high\nbcp_channels:\n" + channel(controllerID(s.Name), "reader") + "---\nThe " + s.Name + " suite's Reader.\n",
		}
		for name, text := range files {
			if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(text), 0o600); err != nil {
				return nil, err
			}
		}
	}
	return bcp.LoadDefinitions(dir)
}
