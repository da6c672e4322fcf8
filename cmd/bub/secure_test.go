package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSecuringTheBus is docs/guide/06-securing.md's walkthrough, as
// written: a token from bub auth token, its hash in a config file, bub
// serve --config, and listen and send-message with BUB_TOKEN; without the
// token, send-message is refused with a line that says where the
// credential goes and does not print it.
func TestSecuringTheBus(t *testing.T) {
	t.Parallel()
	out, _, code := bub(t, nil, "", "auth", "token")
	if code != 0 {
		t.Fatalf("bub auth token exited %d", code)
	}
	var token, hash string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "token: "); ok {
			token = v
		}
		if v, ok := strings.CutPrefix(line, "token_sha256: "); ok {
			hash = v
		}
	}
	if token == "" || len(hash) != 64 {
		t.Fatalf("bub auth token printed %q", out)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "bus.yaml")
	if err := os.WriteFile(config, []byte(`auth:
  identities:
    - name: me
      token_sha256: "`+hash+`"
      client_ids: ["cli-*"]
      publish:   {allow: ["inbound:*"]}
      subscribe: {allow: ["inbound:*"]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startBus(t, filepath.Join(dir, "data"), "--config", config)
	env := []string{"BUB_BUS_URL=" + d.url, "BUB_TOKEN=" + token}

	_, lines, listenErr := startListenProcess(t, env, "inbound:*")
	payload := `{"type":"plaintext_message","text":"hello"}`
	require.Eventually(t, func() bool {
		_, _, code := bub(t, env, "", "send-message", "--topic", "inbound:chat-1", "--payload", payload)
		return code == 0
	}, 20*time.Second, 20*time.Millisecond, "send-message with BUB_TOKEN to reach the listener")
	select {
	case line := <-lines:
		if !strings.Contains(line, `"topic":"inbound:chat-1"`) {
			t.Errorf("listen printed %s", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("listen printed nothing; stderr: %s", listenErr)
	}

	// Without the token, and with a wrong one: refused, and the token is
	// not repeated anywhere.
	for _, env := range [][]string{{"BUB_BUS_URL=" + d.url}, {"BUB_BUS_URL=" + d.url, "BUB_TOKEN=not-" + token}} {
		_, stderr, code := bub(t, env, "", "send-message", "--topic", "inbound:chat-1", "--payload", payload)
		if code == 0 {
			t.Fatalf("send-message with %v was accepted", env[1:])
		}
		if !strings.Contains(stderr, "BUB_TOKEN") || strings.Contains(stderr, token) {
			t.Errorf("refusal with %v: %s", env[1:], stderr)
		}
	}
	// Within the grant only: outbound:* is not granted.
	_, stderr, code := bub(t, env, "", "send-message", "--topic", "outbound:chat-1", "--payload", payload)
	if code == 0 || !strings.Contains(stderr, `may not publish to "outbound:chat-1"`) {
		t.Errorf("send-message outside the grant: exit %d, %s", code, stderr)
	}
	if strings.Contains(d.stderr.String(), token) {
		t.Error("bub serve logged the token")
	}
}
