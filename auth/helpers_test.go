package auth_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/protocol"
)

// now is the fixed time the tests check tokens against.
var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// newKey returns an Ed25519 key pair with its public key written as
// name.pub in dir.
func newKey(t testing.TB, dir, name string) ed25519.PrivateKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := auth.EncodePublicKeyPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pub"), pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return priv
}

// fixture is a configuration with one identity of each kind and a
// spawner issuer, and what it takes to present their credentials.
type fixture struct {
	auth       *auth.Authenticator
	token      string // the "researcher" identity's
	spawnerKey ed25519.PrivateKey
	dir        string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir := t.TempDir()
	key := newKey(t, dir, "spawner")
	token, hash, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	cfg := auth.Config{
		Identities: []auth.Identity{{
			Name:        "researcher",
			TokenSHA256: hash,
			CertSubject: "researcher.example",
			Grant: auth.Grant{
				ClientIDs: []string{"researcher", "agent-*"},
				Publish:   auth.Rules{Allow: []string{"bcp:*", "agent:{{clientId}}"}},
				Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}},
				Rate:      auth.Rate{PerSecond: 5, Burst: 10},
			},
		}},
		Issuers: []auth.Issuer{{
			Name:          "spawner",
			PublicKeyFile: "spawner.pub",
			ClientIDs:     []string{"agent-*"},
			Ceiling: auth.Grant{
				Publish:    auth.Rules{Allow: []string{"outbound:*", "agent:{{clientId}}"}},
				Subscribe:  auth.Rules{Allow: []string{"agent:{{clientId}}", "tg:*"}, Deny: []string{"tg:secret"}},
				Fallback:   true,
				Rate:       auth.Rate{PerSecond: 1, Burst: 2},
				MaxPending: 7,
			},
		}},
	}
	a, err := auth.New(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{auth: a, token: token, spawnerKey: key, dir: dir}
}

// mint signs a token from the spawner issuer.
func (f *fixture) mint(t testing.TB, sub string, c auth.Claims, ttl time.Duration, at time.Time) string {
	t.Helper()
	tok, err := auth.Mint(f.spawnerKey, "spawner", sub, c, ttl, at)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func pattern(t testing.TB, s string) *protocol.Pattern {
	t.Helper()
	p, err := protocol.ParsePattern(s)
	if err != nil {
		t.Fatalf("pattern %q: %v", s, err)
	}
	return p
}
