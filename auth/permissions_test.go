package auth_test

import (
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
)

// TestPermissionMatrix: each row authenticates a credential, binds it to
// a clientId and asks one question. The grants are named for what they
// exercise.
func TestPermissionMatrix(t *testing.T) {
	dir := t.TempDir()
	key := newKey(t, dir, "spawner")
	grants := map[string]auth.Grant{
		// A BCP Reader: publishes bcp:* only, reads its own agent
		// topic only.
		"reader": {
			ClientIDs: []string{"researcher"},
			Publish:   auth.Rules{Allow: []string{"bcp:*"}},
			Subscribe: auth.Rules{Allow: []string{"agent:researcher"}},
		},
		"agents": {
			ClientIDs: []string{"agent-*"},
			Publish:   auth.Rules{Allow: []string{"outbound:", "agent:{{clientId}}"}},
			Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}", "tg:*", "in-[ab]?"}, Deny: []string{"tg:secret", "tg:{{clientId}}:private"}},
		},
		"observer": {
			ClientIDs: []string{"observer"},
			Publish:   auth.Rules{Allow: []string{"*"}},
			Subscribe: auth.Rules{Allow: []string{"*", "system:*"}, Deny: []string{"agent:main"}},
			Admin:     true,
		},
		"spawner": {
			ClientIDs: []string{"spawner"},
			Publish:   auth.Rules{Allow: []string{"system:agent.*"}},
			Subscribe: auth.Rules{Allow: []string{"system:client.*"}},
			Fallback:  true,
		},
		"templated-deny": {
			ClientIDs: []string{"t-*"},
			Publish:   auth.Rules{Allow: []string{"*"}, Deny: []string{"private:{{clientId}}"}},
		},
	}
	cfg := auth.Config{Issuers: []auth.Issuer{{
		Name: "spawner", PublicKeyFile: "spawner.pub", ClientIDs: []string{"agent-*"},
		Ceiling: auth.Grant{
			Publish:   auth.Rules{Allow: []string{"outbound:*", "agent:{{clientId}}"}},
			Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}", "tg:*"}, Deny: []string{"tg:secret"}},
			Fallback:  true,
		},
	}}}
	tokens := map[string]string{}
	for name, g := range grants {
		tok, hash, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tok
		cfg.Identities = append(cfg.Identities, auth.Identity{Name: name, TokenSHA256: hash, Grant: g})
	}
	a, err := auth.New(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	// A JWT whose claims ask for more than the ceiling allows: the
	// effective permissions are the intersection.
	greedy, err := auth.Mint(key, "spawner", "agent-1", auth.Claims{
		Publish:   auth.Rules{Allow: []string{"*", "system:*"}},
		Subscribe: auth.Rules{Allow: []string{"*", "system:*", "tg:"}, Deny: []string{"tg:muted"}},
		Admin:     true, Fallback: true,
	}, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	tokens["jwt-greedy"] = greedy

	type op int
	const (
		pub op = iota
		sub
	)
	tests := []struct {
		cred, clientID string
		op             op
		target         string
		want           bool
		why            string
	}{
		// The BCP shape.
		{"reader", "researcher", pub, "bcp:req.1", true, "allowed namespace"},
		{"reader", "researcher", pub, "agent:main", false, "not granted"},
		{"reader", "researcher", sub, "agent:researcher", true, "its own topic"},
		{"reader", "researcher", sub, "agent:*", false, "agent:researcher does not cover agent:*"},
		{"reader", "researcher", sub, "system:*", false, "not granted"},
		{"reader", "researcher", sub, "*", false, "not granted"},

		// {{clientId}}.
		{"agents", "agent-7", pub, "agent:agent-7", true, "template bound to the id"},
		{"agents", "agent-7", pub, "agent:agent-8", false, "another agent's topic"},
		{"agents", "agent-7", sub, "agent:agent-7", true, "template bound to the id"},
		{"agents", "agent-7", sub, "agent:agent-7*", false, "exact grant does not cover a glob"},
		{"agents", "agent-", sub, "agent:agent-", false, "an id ending in '-' would turn the exact template into a prefix: fail closed"},
		{"agents", "agent-", pub, "agent:agent-", false, "same, for publish"},
		{"agents", "agent-*", sub, "agent:agent-7", false, "an id with pattern characters binds nothing"},
		{"agents", "agent-[7]", pub, "agent:agent-7", false, "a class in the id binds nothing"},

		// Prefix and glob grants, deny over allow.
		{"agents", "agent-7", pub, "outbound:tg:1", true, "prefix grant"},
		{"agents", "agent-7", pub, "outbound", false, "prefix needs the ':'"},
		{"agents", "agent-7", sub, "tg:1", true, "glob grant matches an exact"},
		{"agents", "agent-7", sub, "tg:1*", true, "L* grant covers a narrower glob"},
		{"agents", "agent-7", sub, "tg:secret", false, "deny wins"},
		{"agents", "agent-7", sub, "tg:*", false, "the deny tg:secret overlaps tg:*"},
		{"agents", "agent-7", sub, "tg:s*", false, "the deny overlaps tg:s*"},
		{"agents", "agent-7", sub, "tg:p*", true, "tg:p* cannot match tg:secret"},
		{"agents", "agent-7", sub, "tg:agent-7:private", false, "templated deny"},
		{"agents", "agent-8", sub, "tg:agent-7:private", true, "templated deny is per id"},
		{"agents", "agent-7", sub, "in-a1", true, "class and ? grant matches an exact"},
		{"agents", "agent-7", sub, "in-c1", false, "class refuses"},
		{"agents", "agent-7", sub, "in-[a]1", false, "cannot prove the class covers it"},
		{"agents", "agent-7", sub, "in-a?", false, "cannot prove ? covers ?... unless identical"},
		{"agents", "agent-7", sub, "in-[ab]?", true, "identical glob"},

		// The system: rule and the bus's own topics.
		{"observer", "observer", sub, "agent:x", true, "* covers it"},
		{"observer", "observer", sub, "agent:main", false, "deny wins over *"},
		{"observer", "observer", sub, "agent:*", false, "deny agent:main overlaps agent:*"},
		{"observer", "observer", sub, "*", false, "* could match system: topics; no system: grant covers it"},
		{"observer", "observer", sub, "s*", false, "s* could match system: topics"},
		{"observer", "observer", sub, "system:*", true, "explicit system:* grant"},
		{"observer", "observer", sub, "system:client.connected", true, "explicit system:* grant"},
		{"observer", "observer", sub, "syst", true, "an exact topic that is not in system:"},
		{"observer", "observer", pub, "inbound:x", true, "* allows it"},
		{"observer", "observer", pub, "system:agent.started", false, "* does not grant system: topics"},
		{"observer", "observer", pub, "system:client.connected", false, "bus-owned"},
		{"observer", "observer", pub, "agent:*", false, "not a topic"},
		{"spawner", "spawner", pub, "system:agent.started", true, "explicit system: grant"},
		{"spawner", "spawner", pub, "system:client.subscribed", false, "bus-owned, whatever the grant"},
		{"spawner", "spawner", pub, "system:message.deadlettered", false, "bus-owned"},
		{"spawner", "spawner", sub, "system:client.*", true, "system:client.* covers it"},
		{"spawner", "spawner", sub, "system:*", false, "wider than the grant"},

		// A deny template that cannot be bound denies everything.
		{"templated-deny", "t-1", pub, "anything", true, "bound deny, other topic"},
		{"templated-deny", "t-1", pub, "private:t-1", false, "bound deny"},
		{"templated-deny", "t-[1]", pub, "anything", false, "unbindable deny fails closed"},

		// A JWT: claims ∩ ceiling.
		{"jwt-greedy", "agent-1", pub, "outbound:tg:1", true, "in both"},
		{"jwt-greedy", "agent-1", pub, "inbound:tg:1", false, "claims allow it, the ceiling does not"},
		{"jwt-greedy", "agent-1", pub, "system:agent.started", false, "claims allow system:*, the ceiling does not"},
		{"jwt-greedy", "agent-1", sub, "agent:agent-1", true, "in both"},
		{"jwt-greedy", "agent-1", sub, "agent:agent-2", false, "ceiling template bound to the sub"},
		{"jwt-greedy", "agent-1", sub, "tg:1", true, "in both"},
		{"jwt-greedy", "agent-1", sub, "tg:muted", false, "the claims' deny"},
		{"jwt-greedy", "agent-1", sub, "tg:secret", false, "the ceiling's deny"},
		{"jwt-greedy", "agent-1", sub, "tg:p*", true, "covered by both, denied by neither"},
		{"jwt-greedy", "agent-1", sub, "*", false, "the ceiling does not cover *"},
	}
	for _, tt := range tests {
		p, err := a.Authenticate(tokens[tt.cred], now)
		if err != nil {
			t.Fatalf("%s: %v", tt.cred, err)
		}
		acc := p.Bind(tt.clientID)
		var got bool
		opName := "publish"
		if tt.op == pub {
			got = acc.CanPublish(tt.target)
		} else {
			opName = "subscribe"
			got = acc.CanSubscribe(pattern(t, tt.target))
			// Sent to another node of a cluster with a journal
			// search, the rules decide there as here.
			there, err := acc.ReadRules().Access()
			if err != nil {
				t.Fatalf("%s: read rules: %v", tt.cred, err)
			}
			if there.CanSubscribe(pattern(t, tt.target)) != got {
				t.Errorf("%s as %q: subscribe %q decided by its read rules = %v, by its access %v", tt.cred, tt.clientID, tt.target, !got, got)
			}
		}
		if got != tt.want {
			t.Errorf("%s as %q: %s %q = %v, want %v (%s)", tt.cred, tt.clientID, opName, tt.target, got, tt.want, tt.why)
		}
	}
}

func TestAllowsClientID(t *testing.T) {
	f := newFixture(t)
	p, err := f.auth.Authenticate(f.token, now)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{
		"researcher":  true,
		"agent-1":     true,
		"agent-":      true, // matches agent-*; Bind fails its templates closed
		"main":        false,
		"":            false,
		"agent-*":     false,
		"agent-?":     false,
		"agent-[1]":   false,
		"agent-{1}":   false,
		"agent-\\1":   false,
		"researcher2": false,
	} {
		if got := p.AllowsClientID(id); got != want {
			t.Errorf("AllowsClientID(%q) = %v, want %v", id, got, want)
		}
	}
}

// TestFlagsAndLimits: admin and fallback are the AND of a JWT's claims
// and ceiling, publish_only (a restriction) the OR; rates come from the
// identity or, for a JWT, the ceiling.
func TestFlagsAndLimits(t *testing.T) {
	f := newFixture(t)
	p, _ := f.auth.Authenticate(f.token, now)
	acc := p.Bind("researcher")
	if acc.Admin() || acc.Fallback() || acc.PublishOnly() || acc.Rate() != (auth.Rate{PerSecond: 5, Burst: 10}) || acc.MaxPending() != 0 {
		t.Errorf("static identity: admin %v fallback %v publishOnly %v rate %+v pending %d", acc.Admin(), acc.Fallback(), acc.PublishOnly(), acc.Rate(), acc.MaxPending())
	}
	tests := []struct {
		claims                   auth.Claims
		admin, fallback, pubOnly bool
	}{
		{auth.Claims{}, false, false, false},
		{auth.Claims{Admin: true, Fallback: true}, false, true, false}, // the ceiling grants fallback, not admin
		{auth.Claims{PublishOnly: true}, false, false, true},
	}
	for _, tt := range tests {
		p, err := f.auth.Authenticate(f.mint(t, "agent-1", tt.claims, time.Hour, now), now)
		if err != nil {
			t.Fatal(err)
		}
		acc := p.Bind("agent-1")
		if acc.Admin() != tt.admin || acc.Fallback() != tt.fallback || acc.PublishOnly() != tt.pubOnly {
			t.Errorf("claims %+v: admin %v fallback %v publishOnly %v", tt.claims, acc.Admin(), acc.Fallback(), acc.PublishOnly())
		}
		if acc.Rate() != (auth.Rate{PerSecond: 1, Burst: 2}) || acc.MaxPending() != 7 {
			t.Errorf("jwt limits: rate %+v pending %d, want the ceiling's", acc.Rate(), acc.MaxPending())
		}
	}
}
