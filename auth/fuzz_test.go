package auth_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
)

// FuzzAuthenticate presents arbitrary strings as tokens. Authenticate
// must never panic, and must accept only the static identity's token or
// a JWT that an independent check (EdDSA header, Ed25519 signature by
// the issuer's key, unexpired) also accepts.
func FuzzAuthenticate(f *testing.F) {
	fx := newFixture(f)
	pub := fx.spawnerKey.Public().(ed25519.PublicKey)
	good := fx.mint(f, "agent-1", auth.Claims{Publish: auth.Rules{Allow: []string{"outbound:*"}}}, time.Hour, now)
	for _, seed := range []string{
		"", fx.token, good, good + "x", good[:len(good)-2],
		strings.Replace(good, ".", "..", 1), "a.b.c", "..", "a.b.",
		"eyJhbGciOiJub25lIn0.eyJpc3MiOiJzcGF3bmVyIiwic3ViIjoiYWdlbnQtMSIsImV4cCI6OTk5OTk5OTk5OX0.",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		p, err := fx.auth.Authenticate(token, now)
		if err != nil {
			if p != nil {
				t.Fatalf("error %v with a principal", err)
			}
			return
		}
		if token == fx.token {
			return
		}
		if !independentlyValid(token, pub) {
			t.Fatalf("accepted a token the independent check refuses: %q as %s", token, p.Name())
		}
	})
}

// independentlyValid verifies a compact EdDSA JWT without the jwt
// library, so that a bug there or in its use does not hide itself.
func independentlyValid(token string, pub ed25519.PublicKey) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	header, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	payload, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	sig, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	var c struct {
		Iss string  `json:"iss"`
		Exp float64 `json:"exp"`
	}
	if json.Unmarshal(header, &h) != nil || json.Unmarshal(payload, &c) != nil {
		return false
	}
	return h.Alg == "EdDSA" && c.Iss == "spawner" && float64(now.Unix()) < c.Exp &&
		ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig)
}
