package bus_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/auth/authtest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/protocol"
)

// authFixture is a bus with auth on: static identities for a BCP
// Controller (main), a Reader (researcher), an operator (ops-*) and the
// spawner, and the spawner as an issuer of agent-* tokens.
type authFixture struct {
	srv    *bustest.Server
	key    ed25519.PrivateKey
	dir    string
	config auth.Config
}

func authConfig(t *testing.T, dir string) (auth.Config, ed25519.PrivateKey) {
	t.Helper()
	key := authtest.Issuer(t, dir, "spawner.pub")
	return auth.Config{
		Identities: []auth.Identity{
			{Name: "main", TokenSHA256: authtest.SHA256("main-token"), Grant: auth.Grant{
				ClientIDs: []string{"main"},
				Publish:   auth.Rules{Allow: []string{"bcp:*", "outbound:*", "agent:*"}},
				Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}", "inbound:*"}},
			}},
			{Name: "researcher", TokenSHA256: authtest.SHA256("reader-token"), Grant: auth.Grant{
				ClientIDs: []string{"researcher"},
				Publish:   auth.Rules{Allow: []string{"bcp:*"}},
				Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}},
			}},
			{Name: "ops", TokenSHA256: authtest.SHA256("ops-token"), Grant: auth.Grant{
				ClientIDs: []string{"ops-*"},
				Publish:   auth.Rules{Allow: []string{"inbound:*", "jobs:"}, Deny: []string{"inbound:secret-*"}},
				Subscribe: auth.Rules{Allow: []string{"inbound:", "jobs:?", "jobs:[ab]x"}, Deny: []string{"inbound:secret-*"}},
				Admin:     true,
			}},
			{Name: "tool", TokenSHA256: authtest.SHA256("tool-token"), Grant: auth.Grant{
				ClientIDs:   []string{"tool"},
				Publish:     auth.Rules{Allow: []string{"inbound:*"}},
				PublishOnly: true,
			}},
			{Name: "spawner", TokenSHA256: authtest.SHA256("spawner-token"), Grant: auth.Grant{
				ClientIDs: []string{"spawner"},
				Publish:   auth.Rules{Allow: []string{"system:agent.*"}},
				Subscribe: auth.Rules{Allow: []string{"system:client.*", "tg:*", "agent:*"}},
				Fallback:  true,
			}},
		},
		Issuers: []auth.Issuer{{
			Name: "spawner", PublicKeyFile: "spawner.pub", ClientIDs: []string{"agent-*"},
			Ceiling: auth.Grant{
				Publish:   auth.Rules{Allow: []string{"outbound:*"}},
				Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}", "tg:*"}},
			},
		}},
	}, key
}

func startAuth(t *testing.T) *authFixture {
	t.Helper()
	dir := t.TempDir()
	cfg, key := authConfig(t, dir)
	a, err := auth.New(cfg, dir)
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	return &authFixture{srv: bustest.Start(t, &bus.Options{Auth: a}), key: key, dir: dir, config: cfg}
}

// mint signs a token for clientID valid for ttl; a negative ttl gives one
// that expired that long ago.
func (f *authFixture) mint(t *testing.T, clientID string, claims auth.Claims, ttl time.Duration) string {
	t.Helper()
	now := time.Now()
	if ttl < 0 {
		now, ttl = now.Add(2*ttl), -ttl
	}
	tok, err := auth.Mint(f.key, "spawner", clientID, claims, ttl, now)
	if err != nil {
		t.Fatalf("mint: %v", err)
	}
	return tok
}

// initialize dials with token and initializes as clientID, returning the
// client and the error code of initialize (0 for success).
func initialize(t *testing.T, url, token, clientID string, publishOnly bool) (*bustest.Client, int64) {
	t.Helper()
	c := bustest.DialToken(t, url, token)
	c.OnProcess(bustest.Processed)
	r := c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: clientID, PublishOnly: publishOnly})
	if r.Error != nil {
		return c, r.Error.Code
	}
	return c, 0
}

func code(r bustest.Response) int64 {
	if r.Error != nil {
		return r.Error.Code
	}
	return 0
}

// TestPermissionMatrix checks every permission, allowed and denied, over
// real connections: clientIds, publish, subscribe (containment edges
// included), fallback, admin and publish-only, deny over allow, and
// {{clientId}}.
func TestPermissionMatrix(t *testing.T) {
	f := startAuth(t)
	const ok, forbidden = 0, protocol.CodeForbidden
	type row struct {
		token, clientID, op, arg string
		want                     int64
	}
	rows := []row{
		// clientIds
		{"main-token", "main", "init", "", ok},
		{"main-token", "researcher", "init", "", forbidden},
		{"ops-token", "ops-1", "init", "", ok},
		{"ops-token", "ops-*", "init", "", forbidden}, // a pattern is never a clientId
		{"ops-token", "opsx", "init", "", forbidden},
		{"tool-token", "tool", "init", "", forbidden}, // publish-only credential, full connection
		{"tool-token", "tool", "init-publish-only", "", ok},
		// publish
		{"main-token", "main", "publish", "bcp:query", ok},
		{"main-token", "main", "publish", "agent:researcher", ok},
		{"main-token", "main", "publish", "jobs:1", forbidden},
		{"ops-token", "ops-1", "publish", "inbound:chat", ok},
		{"ops-token", "ops-1", "publish", "inbound:secret-1", forbidden}, // deny wins
		{"ops-token", "ops-1", "publish", "jobs:x", ok},                  // prefix grant
		{"ops-token", "ops-1", "publish", "system:agent.spawned", forbidden},
		{"spawner-token", "spawner", "publish", "system:agent.spawned", ok},
		{"spawner-token", "spawner", "publish", "system:client.subscribed", forbidden}, // the bus's own
		{"tool-token", "tool", "publish", "inbound:x", ok},
		{"tool-token", "tool", "publish", "outbound:x", forbidden},
		// subscribe, {{clientId}} and containment
		{"main-token", "main", "subscribe", "agent:main", ok},
		{"main-token", "main", "subscribe", "agent:researcher", forbidden},
		{"main-token", "main", "subscribe", "agent:*", forbidden},
		{"main-token", "main", "subscribe", "inbound:*", ok},
		{"main-token", "main", "subscribe", "inbound:a", ok},
		{"main-token", "main", "subscribe", "inbound:", ok},
		{"main-token", "main", "subscribe", "inbound:a*", ok},
		{"main-token", "main", "subscribe", "inbound*", forbidden}, // matches inboundx too
		{"main-token", "main", "subscribe", "*", forbidden},
		{"ops-token", "ops-1", "subscribe", "inbound:x", ok},
		{"ops-token", "ops-1", "subscribe", "inbound:secret-1", forbidden}, // deny wins
		{"ops-token", "ops-1", "subscribe", "inbound:*", forbidden},        // overlaps the deny
		{"ops-token", "ops-1", "subscribe", "inbound:s*", forbidden},       // overlaps the deny
		{"ops-token", "ops-1", "subscribe", "inbound:public-*", ok},        // cannot meet the deny
		{"ops-token", "ops-1", "subscribe", "jobs:a", ok},                  // ? covers one character
		{"ops-token", "ops-1", "subscribe", "jobs:ab", forbidden},
		{"ops-token", "ops-1", "subscribe", "jobs:?", ok},           // the grant itself
		{"ops-token", "ops-1", "subscribe", "jobs:[ab]", forbidden}, // undecided simply: refused
		{"ops-token", "ops-1", "subscribe", "jobs:ax", ok},
		{"ops-token", "ops-1", "subscribe", "jobs:cx", forbidden},
		{"ops-token", "ops-1", "subscribe", "jobs:[ab]x", ok},
		{"main-token", "main", "subscribe", "system:*", forbidden},
		{"spawner-token", "spawner", "subscribe", "system:client.*", ok},
		{"spawner-token", "spawner", "subscribe", "system:*", forbidden},
		// fallback
		{"spawner-token", "spawner", "fallback", "tg:*", ok},
		{"main-token", "main", "fallback", "inbound:*", forbidden},
		// admin
		{"ops-token", "ops-1", "dlq", protocol.MethodDLQList, ok},
		{"main-token", "main", "dlq", protocol.MethodDLQList, forbidden},
		{"main-token", "main", "dlq", protocol.MethodDLQPurge, forbidden},
	}
	for _, r := range rows {
		t.Run(strings.Join([]string{r.token, r.clientID, r.op, r.arg}, " "), func(t *testing.T) {
			initOnly := r.op == "init" || r.op == "init-publish-only"
			publishOnly := r.op == "init-publish-only" || (r.token == "tool-token" && r.op != "init")
			c, got := initialize(t, f.srv.URL, r.token, r.clientID, publishOnly)
			if initOnly {
				if got != r.want {
					t.Fatalf("initialize as %q: code %d, want %d", r.clientID, got, r.want)
				}
				return
			}
			if got != 0 {
				t.Fatalf("initialize as %q: code %d", r.clientID, got)
			}
			var resp bustest.Response
			switch r.op {
			case "publish":
				resp = c.Call(protocol.MethodSendMessage, map[string]any{"topic": r.arg, "payload": map[string]any{"type": "t"}})
			case "subscribe":
				resp = c.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: r.arg, Policy: protocol.PolicyContinueAll})
			case "fallback":
				resp = c.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: r.arg, Fallback: true})
			case "dlq":
				params := map[string]any{}
				if r.arg == protocol.MethodDLQPurge {
					params["all"] = true
				}
				resp = c.Call(r.arg, params)
			}
			if got := code(resp); got != r.want {
				t.Fatalf("%s %q: code %d (%v), want %d", r.op, r.arg, got, resp.Error, r.want)
			}
			if r.want == forbidden && !strings.Contains(resp.Error.Message, r.arg) && r.op != "fallback" {
				t.Errorf("refusal %q does not name %q", resp.Error.Message, r.arg)
			}
		})
	}
}

// TestReaderCannotReachController is BCP's shape: a Reader allowed to
// publish only bcp:* and subscribe only agent:researcher can neither
// reach its Controller directly, nor listen beyond its own topic, nor
// become the Controller, nor touch the dead-letter queue.
func TestReaderCannotReachController(t *testing.T) {
	f := startAuth(t)
	main, _ := initialize(t, f.srv.URL, "main-token", "main", false)
	main.Subscribe("agent:main", "")

	reader, got := initialize(t, f.srv.URL, "reader-token", "researcher", false)
	if got != 0 {
		t.Fatalf("reader initialize: %d", got)
	}
	for _, tc := range []struct {
		method string
		params any
	}{
		{protocol.MethodSendMessage, map[string]any{"topic": "agent:main", "payload": map[string]any{"type": "task_request"}}},
		{protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "agent:*"}},
		{protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "system:*"}},
		{protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "agent:main"}},
		{protocol.MethodDLQList, map[string]any{}},
		{protocol.MethodDLQPurge, map[string]any{"all": true}},
	} {
		if r := reader.Call(tc.method, tc.params); code(r) != protocol.CodeForbidden {
			t.Errorf("reader %s %v: %v, want forbidden", tc.method, tc.params, r.Error)
		}
	}
	reader.Subscribe("agent:researcher", "")
	if r := reader.Publish("bcp:response", "bcp_response"); !r.Success && r.Reason != "no_subscribers" {
		t.Errorf("reader publish to bcp:response: %+v", r)
	}

	// The reader's credential cannot initialize as main, so it cannot
	// take main's connection over.
	_, got = initialize(t, f.srv.URL, "reader-token", "main", false)
	if got != protocol.CodeForbidden {
		t.Fatalf("reader initialize as main: %d, want forbidden", got)
	}
	if r := main.Publish("agent:main", "t"); len(r.Acks) != 1 || r.Acks[0].ClientID != "main" {
		t.Fatalf("main lost its subscription: %+v", r)
	}
}

// TestCredentialRefused: a bad bearer token is refused with 401 before any
// WebSocket; no credential, or a bad one in initialize, gets -32009 and
// the connection closes with 4006; a good token in initialize works.
func TestCredentialRefused(t *testing.T) {
	f := startAuth(t)
	for _, bad := range []string{"wrong-token", "Basic main-token", f.mint(t, "agent-1", auth.Claims{}, -time.Minute)} {
		if _, err := bustest.DialWS(f.srv.URL, bad); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
			t.Errorf("upgrade with a bad token: %v, want HTTP 401", err)
		}
	}
	for _, token := range []string{"", "wrong-token"} {
		c := bustest.Dial(t, f.srv.URL)
		r := c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "main", Token: token})
		if code(r) != protocol.CodeUnauthorized {
			t.Fatalf("initialize with token %q: %v, want unauthorized", token, r.Error)
		}
		if strings.Contains(r.Error.Message, "wrong-token") {
			t.Errorf("refusal repeats the token: %q", r.Error.Message)
		}
		if st := c.Closed(); st != protocol.CloseUnauthorized {
			t.Errorf("close status %d, want %d", st, protocol.CloseUnauthorized)
		}
	}
	c := bustest.Dial(t, f.srv.URL)
	if r := c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "main", Token: "main-token"}); r.Error != nil {
		t.Fatalf("initialize with the token in params: %v", r.Error)
	}
	c.Subscribe("agent:main", "")
}

// TestAnonymousGrant: with an anonymous entry, a connection without a
// credential gets exactly that grant.
func TestAnonymousGrant(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := authConfig(t, dir)
	cfg.Anonymous = &auth.Grant{ClientIDs: []string{"web-*"}, Publish: auth.Rules{Allow: []string{"inbound:web-{{clientId}}"}}}
	a, err := auth.New(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := bustest.Start(t, &bus.Options{Auth: a})
	c, got := initialize(t, srv.URL, "", "web-1", false)
	if got != 0 {
		t.Fatalf("anonymous initialize: %d", got)
	}
	if r := c.Call(protocol.MethodSendMessage, map[string]any{"topic": "inbound:web-web-1", "payload": map[string]any{"type": "t"}}); r.Error != nil {
		t.Errorf("anonymous publish to its own topic: %v", r.Error)
	}
	if r := c.Call(protocol.MethodSendMessage, map[string]any{"topic": "inbound:web-web-2", "payload": map[string]any{"type": "t"}}); code(r) != protocol.CodeForbidden {
		t.Errorf("anonymous publish to another's topic: %v", r.Error)
	}
	if _, got := initialize(t, srv.URL, "", "main", false); got != protocol.CodeForbidden {
		t.Errorf("anonymous initialize as main: %d, want forbidden", got)
	}
}

// TestSpawnerMintedTokens: an agent's token works for that agent only,
// within the issuer's ceiling, and tokens that are expired, from an
// unknown issuer or signed some other way are refused.
func TestSpawnerMintedTokens(t *testing.T) {
	f := startAuth(t)
	claims := auth.Claims{
		Publish:   auth.Rules{Allow: []string{"outbound:123", "inbound:*"}}, // inbound:* is above the ceiling
		Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}", "tg:123"}},
	}
	tokA := f.mint(t, "agent-a", claims, time.Hour)
	a, got := initialize(t, f.srv.URL, tokA, "agent-a", false)
	if got != 0 {
		t.Fatalf("agent-a with its own token: %d", got)
	}
	a.Subscribe("agent:agent-a", "")
	a.Subscribe("tg:123", "")
	if r := a.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "agent:agent-b"}); code(r) != protocol.CodeForbidden {
		t.Errorf("agent-a subscribing agent:agent-b: %v", r.Error)
	}
	if r := a.Call(protocol.MethodSendMessage, map[string]any{"topic": "outbound:123", "payload": map[string]any{"type": "t"}}); r.Error != nil {
		t.Errorf("agent-a publishing its reply: %v", r.Error)
	}
	if r := a.Call(protocol.MethodSendMessage, map[string]any{"topic": "inbound:x", "payload": map[string]any{"type": "t"}}); code(r) != protocol.CodeForbidden {
		t.Errorf("agent-a publishing above the issuer's ceiling: %v", r.Error)
	}
	if _, got := initialize(t, f.srv.URL, tokA, "agent-b", false); got != protocol.CodeForbidden {
		t.Errorf("agent-a's token used as agent-b: %d, want forbidden", got)
	}

	other, err := auth.Mint(ed25519.NewKeyFromSeed(make([]byte, 32)), "spawner", "agent-a", claims, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := auth.Mint(f.key, "elsewhere", "agent-a", claims, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{
		"expired":                   f.mint(t, "agent-a", claims, -auth.ClockSkew-time.Second),
		"wrong key":                 other,
		"unknown issuer":            unknown,
		"alg none":                  jwtNone("spawner", "agent-a"),
		"not for agent-*":           f.mint(t, "main", claims, time.Hour),
		"past the maximum lifetime": f.mint(t, "agent-a", claims, auth.DefaultMaxTokenLifetime+time.Hour),
		"exp in the year 2400":      f.signExp(t, "agent-a", time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)),
	} {
		if _, err := bustest.DialWS(f.srv.URL, tok); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
			t.Errorf("%s token: %v, want HTTP 401", name, err)
		}
	}
}

// signExp signs a token for clientID from the spawner issuer, issued now
// and expiring at exp, which auth.Mint cannot reach past the year 2318
// (its ttl is a time.Duration).
func (f *authFixture) signExp(t *testing.T, clientID string, exp time.Time) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{
		Issuer: "spawner", Subject: clientID,
		IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(exp),
	}).SignedString(f.key)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return tok
}

// jwtNone is an unsigned token, alg "none".
func jwtNone(iss, sub string) string {
	enc := func(s string) string { return strings.TrimRight(b64(s), "=") }
	exp := time.Now().Add(time.Hour).Unix()
	return enc(`{"alg":"none","typ":"JWT"}`) + "." + enc(`{"iss":"`+iss+`","sub":"`+sub+`","exp":`+itoa(exp)+`}`) + "."
}

// TestReloadRevokes: after a reload, a connection whose token was removed
// is closed with 4003, one whose subscription is no longer allowed with
// 4004; the others go on.
func TestReloadRevokes(t *testing.T) {
	f := startAuth(t)
	main, _ := initialize(t, f.srv.URL, "main-token", "main", false)
	main.Subscribe("agent:main", "")
	reader, _ := initialize(t, f.srv.URL, "reader-token", "researcher", false)
	reader.Subscribe("agent:researcher", "")
	ops, _ := initialize(t, f.srv.URL, "ops-token", "ops-1", false)
	ops.Subscribe("inbound:x", "")

	cfg := f.config
	cfg.Identities = append([]auth.Identity(nil), cfg.Identities...)
	var kept []auth.Identity
	for _, id := range cfg.Identities {
		switch id.Name {
		case "researcher":
			continue // revoked
		case "ops":
			id.Subscribe.Allow = []string{"jobs:"} // narrowed
		}
		kept = append(kept, id)
	}
	cfg.Identities = kept
	a, err := auth.New(cfg, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	f.srv.SetAuth(a)
	if st := reader.Closed(); st != protocol.CloseCredentialRevoked {
		t.Errorf("revoked reader closed with %d, want %d", st, protocol.CloseCredentialRevoked)
	}
	if st := ops.Closed(); st != protocol.ClosePermissionsChanged {
		t.Errorf("narrowed ops closed with %d, want %d", st, protocol.ClosePermissionsChanged)
	}
	if r := main.Publish("agent:main", "t"); len(r.Acks) != 1 || !r.Acks[0].Processed {
		t.Errorf("main after the reload: %+v", r)
	}
	if _, err := bustest.DialWS(f.srv.URL, "reader-token"); err == nil {
		t.Error("the revoked token still upgrades")
	}
}

// TestBusOwnedTopicsOpenBus: with no auth at all, no peer may publish to
// the bus's own lifecycle topics, which the spawner trusts.
func TestBusOwnedTopicsOpenBus(t *testing.T) {
	srv := bustest.Start(t, nil)
	c := bustest.Connect(t, srv.URL, "anyone", bustest.Processed)
	for _, topic := range []string{bus.TopicClientSubscribed, bus.TopicClientConnected, bus.TopicDeadLettered} {
		r := c.Call(protocol.MethodSendMessage, map[string]any{"topic": topic, "payload": map[string]any{"type": "client_event"}})
		if code(r) != protocol.CodeForbidden {
			t.Errorf("publish to %s on an open bus: %v, want forbidden", topic, r.Error)
		}
	}
	if r := c.Call(protocol.MethodSendMessage, map[string]any{"topic": "system:agent.spawned", "payload": map[string]any{"type": "agent_event"}}); r.Error != nil {
		t.Errorf("publish to system:agent.spawned on an open bus: %v", r.Error)
	}
}

// TestHostCheck: a browser upgrade (it has an Origin) whose Host is not
// this bus is refused, so a web page cannot reach a loopback bus by DNS
// rebinding; the bus's own address and configured names pass.
func TestHostCheck(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{Hosts: []string{"bus.example"}})
	addr := strings.TrimSuffix(strings.TrimPrefix(srv.URL, "ws://"), "/")
	_, port, _ := strings.Cut(addr, ":")
	for host, want := range map[string]bool{
		"attacker.example:" + port: false,
		"attacker.example":         false,
		addr:                       true,
		"localhost:" + port:        true,
		"localhost:1":              false,
		"bus.example":              true,
		"bus.example:" + port:      true,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
		ws, resp, err := websocket.Dial(ctx, srv.URL, &websocket.DialOptions{Host: host, HTTPHeader: http.Header{"Origin": {"http://" + host}}})
		cancel()
		if ws != nil {
			ws.CloseNow()
		}
		if got := err == nil; got != want {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Errorf("Host %s: upgraded %v (HTTP %d, %v), want %v", host, got, status, err, want)
		}
	}
}

// TestClientEventsNameIdentity: lifecycle events carry the identity.
func TestClientEventsNameIdentity(t *testing.T) {
	f := startAuth(t)
	events := make(chan protocol.ProcessMessageParams, 16)
	sp := bustest.DialToken(t, f.srv.URL, "spawner-token")
	sp.OnProcess(func(p protocol.ProcessMessageParams) any {
		events <- p
		return protocol.ProcessMessageResult{}
	})
	sp.Initialize("spawner")
	sp.Subscribe("system:client.*", protocol.PolicyContinueAll)
	initialize(t, f.srv.URL, "main-token", "main", false)
	for {
		select {
		case p := <-events:
			if !strings.Contains(string(p.Payload), `"client_id":"main"`) {
				continue
			}
			if !strings.Contains(string(p.Payload), `"identity":"main"`) {
				t.Fatalf("event without the identity: %s", p.Payload)
			}
			return
		case <-time.After(bustest.Timeout):
			t.Fatal("no connected event for main")
		}
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestGrantLimits: an identity's own rate and pending cap apply to its
// connections, in place of the bus's defaults.
func TestGrantLimits(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := authConfig(t, dir)
	cfg.Identities = append(cfg.Identities,
		auth.Identity{Name: "chatty", TokenSHA256: authtest.SHA256("chatty-token"), Grant: auth.Grant{
			ClientIDs: []string{"chatty"}, Publish: auth.Rules{Allow: []string{"inbound:*"}},
			Rate: auth.Rate{PerSecond: 1.0 / 60, Burst: 1},
		}},
		auth.Identity{Name: "hoarder", TokenSHA256: authtest.SHA256("hoarder-token"), Grant: auth.Grant{
			ClientIDs: []string{"hoarder"}, Publish: auth.Rules{Allow: []string{"agent:*"}},
			MaxPending: 1,
		}},
	)
	a, err := auth.New(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := bustest.Start(t, &bus.Options{Auth: a})
	send := func(c *bustest.Client, topic string) bustest.Response {
		return c.Call(protocol.MethodSendMessage, map[string]any{"topic": topic, "payload": map[string]any{"type": "t"}})
	}
	chatty, _ := initialize(t, srv.URL, "chatty-token", "chatty", false)
	if r := send(chatty, "inbound:1"); r.Error != nil {
		t.Fatalf("first publish: %v", r.Error)
	}
	if r := send(chatty, "inbound:2"); code(r) != protocol.CodeRateLimited {
		t.Errorf("second publish within the identity's rate: %v, want rate limited", r.Error)
	}
	hoarder, _ := initialize(t, srv.URL, "hoarder-token", "hoarder", false)
	if r := send(hoarder, "agent:ghost-1"); r.Error != nil {
		t.Fatalf("first held message: %v", r.Error)
	}
	if r := send(hoarder, "agent:ghost-2"); code(r) != protocol.CodeLimitReached {
		t.Errorf("second held message past the identity's max_pending 1: %v, want limit reached", r.Error)
	}
	// Others are not affected.
	main, _ := initialize(t, srv.URL, "main-token", "main", false)
	if r := send(main, "agent:ghost-3"); r.Error != nil {
		t.Errorf("main after hoarder's cap: %v", r.Error)
	}
}

// TestCredentialExpiresMidConnection: a connection is closed with 4003
// once its token is past exp and the clock-skew allowance, without waiting
// for a reload. The token here expired 27s ago, so the allowance still
// admits it and runs out about four seconds later.
func TestCredentialExpiresMidConnection(t *testing.T) {
	// Mostly waiting (or busy on its own bus): it overlaps the others.
	t.Parallel()
	f := startAuth(t)
	claims := auth.Claims{Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}}}
	tok := f.mint(t, "agent-a", claims, -(auth.ClockSkew - 3*time.Second))
	a, got := initialize(t, f.srv.URL, tok, "agent-a", false)
	if got != 0 {
		t.Fatalf("a token within the skew allowance: %d", got)
	}
	a.Subscribe("agent:agent-a", "")
	if st := a.Closed(); st != protocol.CloseCredentialRevoked {
		t.Errorf("expired credential closed with %d, want %d", st, protocol.CloseCredentialRevoked)
	}
}

// TestExpiryDelay: the credential expiry timer waits until exp and the
// skew allowance, at most MaxExpiryWait, and never a negative time,
// whatever exp a token carries (past the year 2318 the old sum
// overflowed, and the timer fired and re-armed without end).
func TestExpiryDelay(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	allowance := auth.ClockSkew + time.Second
	tests := []struct {
		name string
		exp  time.Time
		want time.Duration
	}{
		{"in an hour", now.Add(time.Hour), time.Hour + allowance},
		{"just expired", now.Add(-time.Second), allowance - time.Second},
		{"in a week: checked daily", now.Add(7 * 24 * time.Hour), bus.MaxExpiryWait + allowance},
		{"in the year 2400", time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC), bus.MaxExpiryWait + allowance},
		{"at the end of time", time.Unix(1<<62, 0), bus.MaxExpiryWait + allowance},
	}
	for _, tt := range tests {
		if got := bus.ExpiryDelay(tt.exp, now); got != tt.want {
			t.Errorf("%s: delay %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestExpiryTimerEndsWithConnection: a connection's credential expiry
// timer is stopped when the connection ends, and a reload's check that
// reaches the connection after its cleanup (SetAuth takes its list of
// connections first) arms none again.
func TestExpiryTimerEndsWithConnection(t *testing.T) {
	f := startAuth(t)
	claims := auth.Claims{Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}}}
	a, got := initialize(t, f.srv.URL, f.mint(t, "agent-a", claims, time.Hour), "agent-a", false)
	if got != 0 {
		t.Fatalf("initialize: %d", got)
	}
	c := bus.ClientConn(f.srv.Server, "agent-a")
	if c == nil || !c.ExpiryArmed() {
		t.Fatal("an initialized connection with a signed token has no expiry timer")
	}
	_ = a.WS.Close(websocket.StatusNormalClosure, "")
	checkfor.Check(t, bustest.Timeout, func() error {
		if c.ExpiryArmed() {
			return errors.New("the expiry timer is still set after the connection closed")
		}
		return nil
	})
	if why := c.Recheck(); why != "" || c.ExpiryArmed() {
		t.Errorf("a reload's check after the cleanup armed the timer again (close reason %q)", why)
	}
}

// TestServerIDReserved: no peer may initialize as the bus's serverId, in
// any case, or as any id starting with bub-, on an open bus or with a
// grant whose client_ids match it; so no message a peer publishes comes
// from the serverId the bus's events come from.
func TestServerIDReserved(t *testing.T) {
	dir := t.TempDir()
	everyone, err := auth.New(auth.Config{Anonymous: &auth.Grant{ClientIDs: []string{"*"}, Publish: auth.Rules{Allow: []string{"*"}}}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	open := bustest.Start(t, nil)
	generated := bustest.Dial(t, open.URL).Initialize("first").ServerID
	if !strings.HasPrefix(generated, "bub-") {
		t.Fatalf("generated serverId %q does not start with bub-", generated)
	}
	hub := bustest.Start(t, &bus.Options{ServerID: "hub", Auth: everyone})
	cluster := bustest.Start(t, &bus.Options{ServerID: "bub-prod"}) // as a cluster named prod would be
	tests := []struct {
		srv      *bustest.Server
		clientID string
		reserved bool
	}{
		{open, generated, true},
		{open, strings.ToUpper(generated), true},
		{open, "bub-", true},
		{open, "bub-next-restart", true},
		{open, "Bub-x", true},
		{open, "bub", false},
		{open, "bubble", false},
		{open, "agent-bub-1", false},
		{hub, "hub", true},
		{hub, "HUB", true},
		{hub, "bub-x", true},
		{hub, "hubby", false},
		{cluster, "bub-prod", true},
		{cluster, "bub-prod-2", true},
	}
	for _, tt := range tests {
		for _, publishOnly := range []bool{false, true} {
			c := bustest.Dial(t, tt.srv.URL)
			r := c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: tt.clientID, PublishOnly: publishOnly})
			switch {
			case tt.reserved && code(r) != protocol.CodeInvalidClientInfo:
				t.Errorf("%q (publishOnly %v): %+v, want %d", tt.clientID, publishOnly, r.Error, protocol.CodeInvalidClientInfo)
			case tt.reserved && !strings.Contains(r.Error.Message, "reserved"):
				t.Errorf("%q: refusal %q does not say the id is reserved", tt.clientID, r.Error.Message)
			case !tt.reserved && r.Error != nil:
				t.Errorf("%q (publishOnly %v): refused: %v", tt.clientID, publishOnly, r.Error)
			}
			_ = c.WS.CloseNow()
		}
	}
}
