package auth_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/bub-bus/bub/auth"
)

func TestAuthenticateStatic(t *testing.T) {
	f := newFixture(t)
	p, err := f.auth.Authenticate(f.token, now)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "researcher" || !p.Expires().IsZero() {
		t.Errorf("principal %q expires %v", p.Name(), p.Expires())
	}
	for _, bad := range []string{f.token + "x", f.token[1:], strings.ToUpper(f.token), "hunter2"} {
		_, err := f.auth.Authenticate(bad, now)
		if !errors.Is(err, auth.ErrBadCredential) {
			t.Errorf("token %q: err %v, want ErrBadCredential", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), bad) {
			t.Errorf("the error repeats the token: %v", err)
		}
	}
	if _, err := f.auth.Authenticate("", now); !errors.Is(err, auth.ErrNoCredential) {
		t.Errorf("no token, no anonymous grant: err %v, want ErrNoCredential", err)
	}
	if p, err := f.auth.AuthenticateCert("researcher.example"); err != nil || p.Name() != "researcher" {
		t.Errorf("cert: %v, %v", p, err)
	}
	for _, cn := range []string{"", "other.example"} {
		if _, err := f.auth.AuthenticateCert(cn); !errors.Is(err, auth.ErrBadCredential) {
			t.Errorf("cert %q: err %v, want ErrBadCredential", cn, err)
		}
	}
}

func TestAuthenticateAnonymous(t *testing.T) {
	a, err := auth.New(auth.Config{Anonymous: &auth.Grant{
		ClientIDs: []string{"guest-*"},
		Publish:   auth.Rules{Allow: []string{"inbound:web"}},
	}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate("", now)
	if err != nil || p.Name() != "anonymous" {
		t.Fatalf("anonymous: %v, %v", p, err)
	}
	if !p.AllowsClientID("guest-1") || p.AllowsClientID("main") {
		t.Error("anonymous client_ids not applied")
	}
	acc := p.Bind("guest-1")
	if !acc.CanPublish("inbound:web") || acc.CanPublish("inbound:tg") || acc.CanSubscribe(pattern(t, "inbound:web")) {
		t.Error("anonymous grant not applied")
	}
	if _, err := a.Authenticate("sometoken", now); !errors.Is(err, auth.ErrBadCredential) {
		t.Errorf("a wrong token is not anonymous: err %v", err)
	}
}

// TestAuthenticateJWT: every way a JWT is refused is refused, wrapping
// ErrBadCredential, with a reason the log can show.
func TestAuthenticateJWT(t *testing.T) {
	f := newFixture(t)
	pubPEM, err := os.ReadFile(filepath.Join(f.dir, "spawner.pub"))
	if err != nil {
		t.Fatal(err)
	}
	pub := f.spawnerKey.Public().(ed25519.PublicKey)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	claims := auth.Claims{Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}}}
	mapClaims := jwt.MapClaims{"iss": "spawner", "sub": "agent-1", "exp": now.Add(time.Hour).Unix(), "bub": map[string]any{}}
	sign := func(m jwt.SigningMethod, key any, c jwt.Claims) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	mustMint := func(key ed25519.PrivateKey, iss, sub string, ttl time.Duration, at time.Time) string {
		s, err := auth.Mint(key, iss, sub, claims, ttl, at)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	noExp := jwt.MapClaims{"iss": "spawner", "sub": "agent-1"}
	futureIat := jwt.MapClaims{"iss": "spawner", "sub": "agent-1", "exp": now.Add(2 * time.Hour).Unix(), "iat": now.Add(time.Hour).Unix()}
	tests := []struct {
		name, token, reason string
	}{
		{"alg none", sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, mapClaims), "signing method none is invalid"},
		{"HS256 keyed with the public key PEM", sign(jwt.SigningMethodHS256, pubPEM, mapClaims), "signing method HS256 is invalid"},
		{"HS256 keyed with the raw public key", sign(jwt.SigningMethodHS256, []byte(pub), mapClaims), "signing method HS256 is invalid"},
		{"unknown issuer", mustMint(f.spawnerKey, "mallory", "agent-1", time.Hour, now), `unknown issuer "mallory"`},
		{"bad signature", mustMint(otherKey, "spawner", "agent-1", time.Hour, now), "bad signature"},
		{"expired", mustMint(f.spawnerKey, "spawner", "agent-1", time.Hour, now.Add(-2*time.Hour)), "expired"},
		{"not yet valid", mustMint(f.spawnerKey, "spawner", "agent-1", time.Hour, now.Add(time.Minute)), "not yet valid"},
		{"no exp", sign(signingEdDSA, f.spawnerKey, noExp), "required claim is missing"},
		{"issued in the future", sign(signingEdDSA, f.spawnerKey, futureIat), "issued in the future"},
		{"sub outside the issuer's client_ids", mustMint(f.spawnerKey, "spawner", "main", time.Hour, now), "not among the issuer's client_ids"},
		{"sub ending in a dash", mustMint(f.spawnerKey, "spawner", "agent-", time.Hour, now), "not an exact clientId"},
		{"sub with a pattern character", sign(signingEdDSA, f.spawnerKey, jwt.MapClaims{"iss": "spawner", "sub": "agent-*", "exp": now.Add(time.Hour).Unix()}), "has one of"},
		{"claims that do not compile", sign(signingEdDSA, f.spawnerKey, jwt.MapClaims{"iss": "spawner", "sub": "agent-1", "exp": now.Add(time.Hour).Unix(), "bub": map[string]any{"publish": map[string]any{"allow": []string{"a b"}}}}), "bub claims"},
		{"garbage in JWT shape", "abc.def.ghi", "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := f.auth.Authenticate(tt.token, now)
			if !errors.Is(err, auth.ErrBadCredential) {
				t.Fatalf("accepted as %v (err %v)", p, err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("error %q does not say %q", err, tt.reason)
			}
		})
	}

	good := mustMint(f.spawnerKey, "spawner", "agent-1", time.Hour, now)
	p, err := f.auth.Authenticate(good, now.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "spawner/agent-1" || !p.Expires().Equal(now.Add(time.Hour)) {
		t.Errorf("name %q expires %v", p.Name(), p.Expires())
	}
	// An agent's token cannot be used to act as another agent, even one
	// the issuer could issue for.
	if !p.AllowsClientID("agent-1") || p.AllowsClientID("agent-2") || p.AllowsClientID("agent-*") {
		t.Error("a JWT principal must initialize only as its sub")
	}
	// Thirty seconds of clock skew are tolerated on both ends, no more.
	if _, err := f.auth.Authenticate(good, now.Add(time.Hour+20*time.Second)); err != nil {
		t.Errorf("20s after exp, within the leeway: %v", err)
	}
	if _, err := f.auth.Authenticate(good, now.Add(time.Hour+31*time.Second)); !errors.Is(err, auth.ErrBadCredential) {
		t.Errorf("31s after exp: err %v", err)
	}
	early := mustMint(f.spawnerKey, "spawner", "agent-1", time.Hour, now.Add(20*time.Second))
	if _, err := f.auth.Authenticate(early, now); err != nil {
		t.Errorf("minted by a clock 20s ahead: %v", err)
	}
}

var signingEdDSA = jwt.SigningMethodEdDSA

func TestNewValidates(t *testing.T) {
	dir := t.TempDir()
	newKey(t, dir, "iss")
	if err := os.WriteFile(filepath.Join(dir, "junk.pub"), []byte("not a key"), 0o644); err != nil {
		t.Fatal(err)
	}
	hash := strings.Repeat("ab", 32)
	id := func(name, hash string, mod func(*auth.Identity)) auth.Config {
		i := auth.Identity{Name: name, TokenSHA256: hash, Grant: auth.Grant{ClientIDs: []string{"x"}}}
		if mod != nil {
			mod(&i)
		}
		return auth.Config{Identities: []auth.Identity{i}}
	}
	iss := func(mod func(*auth.Issuer)) auth.Config {
		i := auth.Issuer{Name: "spawner", PublicKeyFile: "iss.pub", ClientIDs: []string{"agent-*"}}
		if mod != nil {
			mod(&i)
		}
		return auth.Config{Issuers: []auth.Issuer{i}}
	}
	tests := []struct {
		name string
		cfg  auth.Config
		want string // "" for a valid configuration
	}{
		{"valid identity", id("a", hash, nil), ""},
		{"valid issuer", iss(nil), ""},
		{"uppercase hash", id("a", strings.ToUpper(hash), nil), ""},
		{"cert only", id("a", "", func(i *auth.Identity) { i.CertSubject = "a.example" }), ""},
		{"no name", id("", hash, nil), "name is required"},
		{"reserved name", id("anonymous", hash, nil), "reserved"},
		{"short hash", id("a", "abc", nil), `identity 1 ("a"): token_sha256 is 3 characters`},
		{"hash not hex", id("a", strings.Repeat("zz", 32), nil), "not hex"},
		{"no credential", id("a", "", nil), "neither token_sha256 nor cert_subject"},
		{"no client_ids", id("a", hash, func(i *auth.Identity) { i.ClientIDs = nil }), "client_ids is empty"},
		{"clientId in client_ids", id("a", hash, func(i *auth.Identity) { i.ClientIDs = []string{"{{clientId}}"} }), "allowed only in publish and subscribe"},
		{"bad client_ids", id("a", hash, func(i *auth.Identity) { i.ClientIDs = []string{"a b"} }), "client_ids"},
		{"bad publish pattern", id("a", hash, func(i *auth.Identity) { i.Publish.Allow = []string{"ok", "agent:{{clientID}}"} }), `identity 1 ("a"): publish allow pattern "agent:{{clientID}}"`},
		{"bad subscribe deny", id("a", hash, func(i *auth.Identity) { i.Subscribe.Deny = []string{"[a"} }), `subscribe deny pattern "[a"`},
		{"negative rate", id("a", hash, func(i *auth.Identity) { i.Rate.PerSecond = -1 }), "negative"},
		{"duplicate names", auth.Config{Identities: []auth.Identity{
			{Name: "a", TokenSHA256: hash, Grant: auth.Grant{ClientIDs: []string{"x"}}},
			{Name: "a", TokenSHA256: strings.Repeat("cd", 32), Grant: auth.Grant{ClientIDs: []string{"x"}}},
		}}, "name used by another identity"},
		{"shared hash", auth.Config{Identities: []auth.Identity{
			{Name: "a", TokenSHA256: hash, Grant: auth.Grant{ClientIDs: []string{"x"}}},
			{Name: "b", TokenSHA256: strings.ToUpper(hash), Grant: auth.Grant{ClientIDs: []string{"x"}}},
		}}, `identity 2 ("b"): token_sha256 is also identity "a"'s`},
		{"issuer without client_ids", iss(func(i *auth.Issuer) { i.ClientIDs = nil }), `issuer 1 ("spawner"): client_ids is empty`},
		{"issuer key missing", iss(func(i *auth.Issuer) { i.PublicKeyFile = "nope.pub" }), "nope.pub"},
		{"issuer key not PEM", iss(func(i *auth.Issuer) { i.PublicKeyFile = "junk.pub" }), "no PEM block"},
		{"issuer without key", iss(func(i *auth.Issuer) { i.PublicKeyFile = "" }), "public_key_file is required"},
		{"issuer ceiling pattern", iss(func(i *auth.Issuer) { i.Ceiling.Subscribe.Allow = []string{"{{x}}"} }), `ceiling: subscribe allow pattern "{{x}}"`},
		{"duplicate issuers", auth.Config{Issuers: []auth.Issuer{
			{Name: "s", PublicKeyFile: "iss.pub", ClientIDs: []string{"a"}},
			{Name: "s", PublicKeyFile: "iss.pub", ClientIDs: []string{"a"}},
		}}, "name used by another issuer"},
		{"anonymous pattern", auth.Config{Anonymous: &auth.Grant{Publish: auth.Rules{Allow: []string{"a\\b"}}}}, "anonymous: publish allow pattern"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := auth.New(tt.cfg, dir)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("valid configuration refused: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("accepted; want an error saying %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestNewToken(t *testing.T) {
	tok, hash, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 43 || len(hash) != 64 || strings.ContainsAny(tok, ".+/=") {
		t.Fatalf("token %d chars, hash %q", len(tok), hash)
	}
	tok2, _, _ := auth.NewToken()
	if tok == tok2 {
		t.Fatal("two tokens are equal")
	}
	a, err := auth.New(auth.Config{Identities: []auth.Identity{{Name: "n", TokenSHA256: hash, Grant: auth.Grant{ClientIDs: []string{"n"}}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(tok, now); err != nil {
		t.Fatalf("the token does not authenticate against its own hash: %v", err)
	}
}

func TestMintRefuses(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	tests := []struct {
		name     string
		key      ed25519.PrivateKey
		iss, sub string
		claims   auth.Claims
		ttl      time.Duration
		want     string
	}{
		{"short key", key[:10], "s", "a", auth.Claims{}, time.Hour, "private key is 10 bytes"},
		{"no issuer", key, "", "a", auth.Claims{}, time.Hour, "issuer is required"},
		{"pattern sub", key, "s", "a*", auth.Claims{}, time.Hour, `clientId "a*"`},
		{"no ttl", key, "s", "a", auth.Claims{}, 0, "ttl 0s is not positive"},
		{"bad claims", key, "s", "a", auth.Claims{Publish: auth.Rules{Deny: []string{"{"}}}, time.Hour, `publish deny pattern "{"`},
	}
	for _, tt := range tests {
		if _, err := auth.Mint(tt.key, tt.iss, tt.sub, tt.claims, tt.ttl, now); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	privPEM, err := auth.EncodePrivateKeyPEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "k")
	if err := os.WriteFile(path, privPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := auth.LoadPrivateKey(path)
	if err != nil || !got.Equal(priv) {
		t.Fatalf("LoadPrivateKey: %v", err)
	}
	pubPEM, _ := auth.EncodePublicKeyPEM(pub)
	if got, err := auth.ParsePublicKeyPEM(pubPEM); err != nil || !got.Equal(pub) {
		t.Fatalf("ParsePublicKeyPEM: %v", err)
	}
	if _, err := auth.ParsePublicKeyPEM(privPEM); err == nil || !strings.Contains(err.Error(), `"PRIVATE KEY"`) {
		t.Errorf("a private key read as public: %v", err)
	}
	if _, err := auth.LoadPrivateKey(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v", err)
	}
}

// TestMaxTokenLifetime: a JWT valid for longer than the maximum token
// lifetime, from its iat (or from now without one) to its exp, is
// refused, however far off its exp: one past the year 2318 once made the
// bus's expiry timer overflow and spin.
func TestMaxTokenLifetime(t *testing.T) {
	f := newFixture(t)
	hourly := newFixtureWith(t, f, time.Hour)
	claims := auth.Claims{Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}}}
	far := time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)
	signed := func(c jwt.MapClaims) string {
		c["iss"], c["sub"] = "spawner", "agent-1"
		s, err := jwt.NewWithClaims(signingEdDSA, c).SignedString(f.spawnerKey)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name  string
		auth  *auth.Authenticator
		token string
		ok    bool
	}{
		{"the default maximum", f.auth, f.mint(t, "agent-1", claims, auth.DefaultMaxTokenLifetime, now), true},
		{"a second over the default", f.auth, f.mint(t, "agent-1", claims, auth.DefaultMaxTokenLifetime+time.Second, now), false},
		{"a long life mostly spent still counts whole", f.auth, f.mint(t, "agent-1", claims, auth.DefaultMaxTokenLifetime+time.Hour, now.Add(-auth.DefaultMaxTokenLifetime)), false},
		{"exp in 2400", f.auth, signed(jwt.MapClaims{"iat": now.Unix(), "exp": far.Unix()}), false},
		{"exp in 2400, no iat", f.auth, signed(jwt.MapClaims{"exp": far.Unix()}), false},
		{"exp some 31 million years ahead", f.auth, signed(jwt.MapClaims{"iat": now.Unix(), "exp": 1e15}), false},
		{"iat later than now counts from now", f.auth, signed(jwt.MapClaims{"iat": now.Add(20 * time.Second).Unix(), "exp": now.Add(auth.DefaultMaxTokenLifetime + 10*time.Second).Unix()}), false},
		{"within a configured hour", hourly, f.mint(t, "agent-1", claims, time.Hour, now), true},
		{"over a configured hour", hourly, f.mint(t, "agent-1", claims, time.Hour+time.Second, now), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.auth.Authenticate(tt.token, now)
			switch {
			case tt.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tt.ok && err == nil:
				t.Fatalf("accepted as %s, expiring %v", p.Name(), p.Expires())
			case !tt.ok && (!errors.Is(err, auth.ErrBadCredential) || !strings.Contains(err.Error(), "longer than the maximum token lifetime")):
				t.Fatalf("err %v, want ErrBadCredential naming the maximum token lifetime", err)
			}
		})
	}
	if _, err := auth.New(auth.Config{MaxTokenLifetime: -time.Second}, f.dir); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("a negative maximum: err %v, want one naming it negative", err)
	}
}

// newFixtureWith compiles f's spawner issuer again with a maximum token
// lifetime of max.
func newFixtureWith(t *testing.T, f *fixture, max time.Duration) *auth.Authenticator {
	t.Helper()
	a, err := auth.New(auth.Config{
		Issuers:          []auth.Issuer{{Name: "spawner", PublicKeyFile: "spawner.pub", ClientIDs: []string{"agent-*"}, Ceiling: auth.Grant{Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}}}}},
		MaxTokenLifetime: max,
	}, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
