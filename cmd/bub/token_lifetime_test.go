package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/auth/authtest"
)

// TestMaxTokenLifetimeSetting: --max-token-lifetime, BUB_MAX_TOKEN_LIFETIME
// and the file's max_token_lifetime each bound the JWTs the
// Authenticator serve builds accepts; the default is
// auth.DefaultMaxTokenLifetime, and a value that is not positive is
// refused naming the flag.
func TestMaxTokenLifetimeSetting(t *testing.T) {
	dir := t.TempDir()
	key := authtest.Issuer(t, dir, "spawner.pub")
	const authSection = "auth:\n  issuers:\n    - {name: spawner, public_key_file: spawner.pub, client_ids: [\"agent-*\"]}\n"
	plain := writeFile(t, dir, "plain.yaml", authSection)
	hourly := writeFile(t, dir, "hourly.yaml", "max_token_lifetime: 1h\n"+authSection)
	mint := func(ttl time.Duration) string {
		tok, err := auth.Mint(key, "spawner", "agent-1", auth.Claims{}, ttl, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tests := []struct {
		name    string
		env     string
		args    []string
		longest time.Duration
	}{
		{"default", "", []string{"--config", plain}, auth.DefaultMaxTokenLifetime},
		{"flag", "", []string{"--config", plain, "--max-token-lifetime", "1h"}, time.Hour},
		{"variable", "1h", []string{"--config", plain}, time.Hour},
		{"file", "", []string{"--config", hourly}, time.Hour},
		{"the flag wins over the file", "", []string{"--config", hourly, "--max-token-lifetime", "2h"}, 2 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setenv(t, "BUB_MAX_TOKEN_LIFETIME", tt.env)
			cfg, _, err := loadServeConfig(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			a, err := loadAuth(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Authenticate(mint(tt.longest), time.Now()); err != nil {
				t.Errorf("a token valid for %s refused: %v", tt.longest, err)
			}
			if _, err := a.Authenticate(mint(tt.longest+time.Minute), time.Now()); err == nil || !strings.Contains(err.Error(), "maximum token lifetime") {
				t.Errorf("a token valid for %s: err %v, want refused for its lifetime", tt.longest+time.Minute, err)
			}
		})
	}
	setenv(t, "BUB_MAX_TOKEN_LIFETIME", "")
	cfg, _, err := loadServeConfig([]string{"--config", plain, "--max-token-lifetime", "0s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadAuth(cfg); err == nil || !strings.Contains(err.Error(), "--max-token-lifetime") {
		t.Errorf("a zero lifetime: err %v, want one naming --max-token-lifetime", err)
	}
}

// setenv sets name to value for the test, or unsets it when value is "",
// since serve reads a variable that is set but empty as a value.
func setenv(t *testing.T, name, value string) {
	t.Setenv(name, value)
	if value == "" {
		_ = os.Unsetenv(name)
	}
}
