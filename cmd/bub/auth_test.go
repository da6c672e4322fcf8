package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
)

func TestAuthUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
	}{
		{[]string{"auth"}, 2},
		{[]string{"auth", "--help"}, 0},
		{[]string{"auth", "help"}, 0},
		{[]string{"auth", "frobnicate"}, 2},
		{[]string{"auth", "token", "extra"}, 2},
		{[]string{"auth", "token", "--bogus"}, 2},
		{[]string{"auth", "keygen"}, 2},
		{[]string{"auth", "issue", "--help"}, 0},
		{[]string{"auth", "issue", "--issuer", "s", "--client-id", "a"}, 2},
		{[]string{"auth", "issue", "--key", "k", "--client-id", "a"}, 2},
		{[]string{"auth", "issue", "--key", "k", "--issuer", "s"}, 2},
	}
	for _, tt := range tests {
		code, stdout, stderr := runBub(t, "", tt.args...)
		if code != tt.code {
			t.Errorf("bub %s: exit %d, want %d: %s", strings.Join(tt.args, " "), code, tt.code, stderr)
		}
		// Help that was asked for is output; a mistake is said on stderr.
		if said := map[bool]string{true: stdout, false: stderr}[code == 0]; said == "" {
			t.Errorf("bub %s: nothing said", strings.Join(tt.args, " "))
		}
	}
}

// TestAuthToken: the token and its hash are printed on labelled lines,
// and the hash is the token's, so a configuration built from the output
// accepts the token.
func TestAuthToken(t *testing.T) {
	code, stdout, stderr := runBub(t, "", "auth", "token")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "token: ") || !strings.HasPrefix(lines[1], "token_sha256: ") {
		t.Fatalf("output:\n%s", stdout)
	}
	token, hash := strings.TrimPrefix(lines[0], "token: "), strings.TrimPrefix(lines[1], "token_sha256: ")
	if sum := sha256.Sum256([]byte(token)); hex.EncodeToString(sum[:]) != hash {
		t.Fatalf("token_sha256 %s is not the token's", hash)
	}
	if !strings.Contains(stderr, "shown once") {
		t.Errorf("stderr does not warn that the token is shown once: %q", stderr)
	}
	a, err := auth.New(auth.Config{Identities: []auth.Identity{{Name: "n", TokenSHA256: hash, Grant: auth.Grant{ClientIDs: []string{"n"}}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(token, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// TestAuthKeygenIssue: keygen writes a key pair with the private half
// unreadable by others and refuses to overwrite it; issue signs a token
// the bus accepts from an issuer configured with the public half.
func TestAuthKeygenIssue(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "spawner")
	if code, _, stderr := runBub(t, "", "auth", "keygen", "--out", key); code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, stderr)
	}
	for path, mode := range map[string]os.FileMode{key: 0o600, key + ".pub": 0o644} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&^mode != 0 {
			t.Errorf("%s: mode %v, want at most %v", path, fi.Mode().Perm(), mode)
		}
	}
	before, _ := os.ReadFile(key)
	code, _, stderr := runBub(t, "", "auth", "keygen", "--out", key)
	if code != 1 || !strings.Contains(stderr, "refusing to overwrite") {
		t.Errorf("second keygen: exit %d: %s", code, stderr)
	}
	if after, _ := os.ReadFile(key); string(after) != string(before) {
		t.Error("second keygen changed the private key")
	}
	// Only the public key exists: keygen must not write the private key
	// either.
	lone := filepath.Join(dir, "lone")
	writeFile(t, dir, "lone.pub", "x")
	if code, _, _ := runBub(t, "", "auth", "keygen", "--out", lone); code != 1 {
		t.Errorf("keygen over an existing .pub: exit %d", code)
	}
	if _, err := os.Stat(lone); !os.IsNotExist(err) {
		t.Errorf("keygen left %s behind: %v", lone, err)
	}

	code, stdout, stderr := runBub(t, "", "auth", "issue", "--key", key, "--issuer", "spawner", "--client-id", "agent-1",
		"--publish", "outbound:*, agent:{{clientId}},inbound:*", "--subscribe", "agent:{{clientId}}", "--subscribe-deny", "agent:x",
		"--admin", "--ttl", "1h")
	if code != 0 {
		t.Fatalf("issue: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, `"agent-1"`) {
		t.Errorf("issue does not say whom the token is for: %q", stderr)
	}
	a, err := auth.New(auth.Config{Issuers: []auth.Issuer{{
		Name: "spawner", PublicKeyFile: "spawner.pub", ClientIDs: []string{"agent-*"},
		Ceiling: auth.Grant{Publish: auth.Rules{Allow: []string{"outbound:*", "agent:{{clientId}}"}}, Subscribe: auth.Rules{Allow: []string{"agent:*"}}},
	}}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(strings.TrimSpace(stdout), time.Now())
	if err != nil {
		t.Fatalf("the issued token is refused: %v", err)
	}
	acc := p.Bind("agent-1")
	switch {
	case p.Name() != "spawner/agent-1":
		t.Errorf("name %q", p.Name())
	case time.Until(p.Expires()) > time.Hour || time.Until(p.Expires()) < 50*time.Minute:
		t.Errorf("expires %v, want in about an hour", p.Expires())
	case !acc.CanPublish("outbound:tg") || !acc.CanPublish("agent:agent-1"):
		t.Error("claims in the ceiling refused")
	case acc.CanPublish("inbound:tg"):
		t.Error("a claim beyond the ceiling allowed")
	case acc.Admin():
		t.Error("admin allowed though the ceiling does not grant it")
	}

	if code, _, stderr := runBub(t, "", "auth", "issue", "--key", key+".pub", "--issuer", "s", "--client-id", "a"); code != 1 || !strings.Contains(stderr, "PUBLIC KEY") {
		t.Errorf("issue with the public key: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runBub(t, "", "auth", "issue", "--key", key, "--issuer", "s", "--client-id", "agent-*"); code != 1 || !strings.Contains(stderr, "agent-*") {
		t.Errorf("issue for a pattern: exit %d: %s", code, stderr)
	}
}
