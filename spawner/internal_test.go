package spawner

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/protocol"
)

func TestAgentEnv(t *testing.T) {
	base := []string{
		"PATH=/usr/bin",
		"OPENAI_API_KEY=sk-secret",
		"BUB_CLIENT_ID=spawner",
		"BUB_AGENT_ID=stale",
		"BUB_BUS_URL=ws://stale/",
		"BUB_TOKEN=the-spawners-own",
		"BUB_TOKEN_FILE=/etc/bub/spawner.token",
	}
	env := agentEnv(base, "ws://127.0.0.1:7892/", "agent-1", "tg:1", "/w/tg_1", "")
	want := []string{
		"PATH=/usr/bin",
		"OPENAI_API_KEY=sk-secret",
		"BUB_BUS_URL=ws://127.0.0.1:7892/",
		"BUB_AGENT_ID=agent-1",
		"BUB_DEFAULT_TOPIC=tg:1",
		"BUB_WORKSPACE=/w/tg_1",
	}
	if !slices.Equal(env, want) {
		t.Errorf("agentEnv:\n got %q\nwant %q", env, want)
	}
	env = agentEnv(base, "ws://127.0.0.1:7892/", "agent-1", "tg:1", "/w/tg_1", "agents-own")
	if want := append(want, "BUB_TOKEN=agents-own"); !slices.Equal(env, want) {
		t.Errorf("agentEnv with a minted token:\n got %q\nwant %q", env, want)
	}
}

func TestBackoff(t *testing.T) {
	s := &Spawner{opts: Options{RestartDelay: time.Second, RestartDelayMax: 10 * time.Second}}
	want := []time.Duration{0, 0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for n, w := range want {
		if got := s.backoff(n); got != w {
			t.Errorf("backoff(%d) = %s, want %s", n, got, w)
		}
	}
	if got := s.backoff(1000); got != 10*time.Second {
		t.Errorf("backoff(1000) = %s", got)
	}
}

func TestLineLogger(t *testing.T) {
	var out bytes.Buffer
	w := &lineLogger{log: slog.New(slog.NewJSONHandler(&out, nil)).With("agent_id", "agent-1"), stream: "stderr"}
	w.Write([]byte("one\r\ntw"))
	w.Write([]byte("o\nthree"))
	w.Write([]byte(strings.Repeat("x", maxLogLine+5)))
	w.flush()
	var lines []string
	for _, rec := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r struct {
			AgentID string `json:"agent_id"`
			Stream  string `json:"stream"`
			Line    string `json:"line"`
		}
		if err := json.Unmarshal([]byte(rec), &r); err != nil || r.AgentID != "agent-1" || r.Stream != "stderr" {
			t.Fatalf("log record %.100s: %+v, %v", rec, r, err)
		}
		lines = append(lines, r.Line)
	}
	want := []string{"one", "two", "three" + strings.Repeat("x", maxLogLine-5), "xxxxxxxxxx"}
	if !slices.Equal(lines, want) {
		t.Errorf("lines: got %d %q..., want %d", len(lines), lines[0], len(want))
	}
}

// TestIssuerMintsScopedTokens: a minted token lets the agent do what the
// template says, for its own id and topic, and nothing else.
func TestIssuerMintsScopedTokens(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pemBytes, err := auth.EncodePublicKeyPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "k.pub"), pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{Issuers: []auth.Issuer{{
		Name: "spawner", PublicKeyFile: "k.pub", ClientIDs: []string{"agent-*"},
		Ceiling: auth.Grant{Publish: auth.Rules{Allow: []string{"outbound:*"}}, Subscribe: auth.Rules{Allow: []string{"agent:*", "tg:*"}}},
	}}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := (&Issuer{Name: "spawner", Key: key}).mint("agent-1", "tg:42", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(tok, time.Now())
	if err != nil {
		t.Fatalf("the bus refuses the minted token: %v", err)
	}
	if !p.AllowsClientID("agent-1") || p.AllowsClientID("agent-2") {
		t.Error("the token is not bound to agent-1 alone")
	}
	access := p.Bind("agent-1")
	for topic, want := range map[string]bool{"outbound:42": true, "outbound:43": false, "tg:42": false} {
		if got := access.CanPublish(topic); got != want {
			t.Errorf("publish %s: %v, want %v", topic, got, want)
		}
	}
	for pattern, want := range map[string]bool{"agent:agent-1": true, "tg:42": true, "agent:agent-2": false, "tg:*": false} {
		pp, err := protocol.ParsePattern(pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := access.CanSubscribe(pp); got != want {
			t.Errorf("subscribe %s: %v, want %v", pattern, got, want)
		}
	}
}
