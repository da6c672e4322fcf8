package bus_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// TestReloadRacesHandshakes: a connection that initializes while a reload
// revokes its credential never keeps it. Each round upgrades victims with
// tokens of the spawner issuer, sends all their initializes at once and,
// once some have been answered, reloads a configuration without that
// issuer; when the reload returns, no open connection may hold a
// spawner/ identity, and each victim that initialized is closed with
// 4003. Bounded by rounds and time; the race it covers showed in about 2
// of 26,700 handshakes before initialize checked the Authenticator under
// the lock that commits it.
func TestReloadRacesHandshakes(t *testing.T) {
	f := startAuth(t)
	granted, err := auth.New(f.config, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	revokedCfg := f.config
	revokedCfg.Issuers = nil
	revoked, err := auth.New(revokedCfg, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	const victims = 16
	claims := auth.Claims{Publish: auth.Rules{Allow: []string{"outbound:*"}}}
	deadline := time.Now().Add(3 * time.Second)
	handshakes := 0
	for round := 0; round < 2*victims && time.Now().Before(deadline); round++ {
		f.srv.SetAuth(granted)
		clients := make([]*bustest.Client, victims)
		for i := range clients {
			id := fmt.Sprintf("agent-r%d-%d", round, i)
			clients[i] = bustest.DialToken(t, f.srv.URL, f.mint(t, id, claims, time.Hour))
		}
		codes := make([]int64, victims)
		answered := make(chan struct{}, victims)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				codes[i] = code(c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: fmt.Sprintf("agent-r%d-%d", round, i)}))
				answered <- struct{}{}
			}()
		}
		close(start)
		// Reload after a varying number of answers, so that across
		// rounds the reload lands at every point of the burst.
		for range round % victims {
			<-answered
		}
		f.srv.SetAuth(revoked)
		wg.Wait()
		handshakes += victims
		for _, id := range bus.OpenIdentities(f.srv.Server) {
			if strings.HasPrefix(id, "spawner/") {
				t.Fatalf("round %d (%d handshakes): %s initialized during the revoking reload and kept its revoked credential", round, handshakes, id)
			}
		}
		for i, c := range clients {
			if codes[i] != 0 {
				continue
			}
			if st := c.Closed(); st != protocol.CloseCredentialRevoked {
				t.Fatalf("round %d: victim %d initialized, then closed with %d, want %d", round, i, st, protocol.CloseCredentialRevoked)
			}
		}
		for _, c := range clients {
			_ = c.WS.CloseNow()
		}
	}
	t.Logf("%d racing handshakes", handshakes)
}

// TestStaleRecheckChangesNothing: a check against an Authenticator a
// reload has since replaced (an expiry timer's, or a slower reload's)
// does not undo what the newer reload decided, neither by restoring the
// wider permissions of before nor by opening the bus.
func TestStaleRecheckChangesNothing(t *testing.T) {
	f := startAuth(t)
	wide, err := auth.New(f.config, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	narrowCfg := f.config
	narrowCfg.Identities = append([]auth.Identity(nil), f.config.Identities...)
	for i := range narrowCfg.Identities {
		if narrowCfg.Identities[i].Name == "ops" {
			narrowCfg.Identities[i].Publish.Allow = []string{"jobs:"}
		}
	}
	narrow, err := auth.New(narrowCfg, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	f.srv.SetAuth(wide)
	ops, got := initialize(t, f.srv.URL, "ops-token", "ops-1", false)
	if got != 0 {
		t.Fatalf("initialize: %d", got)
	}
	publish := func() int64 {
		return code(ops.Call(protocol.MethodSendMessage, map[string]any{"topic": "inbound:x", "payload": map[string]any{"type": "t"}}))
	}
	if c := publish(); c != 0 {
		t.Fatalf("publish under the wide grant: %d", c)
	}
	f.srv.SetAuth(narrow)
	if c := publish(); c != protocol.CodeForbidden {
		t.Fatalf("publish after narrowing: %d, want %d", c, protocol.CodeForbidden)
	}
	conn := bus.ClientConn(f.srv.Server, "ops-1")
	for name, stale := range map[string]*auth.Authenticator{"the replaced configuration": wide, "an open bus": nil} {
		if why := conn.RecheckAgainst(stale); why != "" {
			t.Errorf("a stale check against %s closed the connection: %s", name, why)
		}
		if c := publish(); c != protocol.CodeForbidden {
			t.Errorf("after a stale check against %s, publish: %d, want %d", name, c, protocol.CodeForbidden)
		}
	}
}
