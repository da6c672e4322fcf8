package main

import (
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// TestWebhooksEndToEnd runs bub serve with a webhooks: section: signed
// requests to its incoming hooks get every status over real HTTP, and
// what they publish goes out to a webhook subscription, a local
// receiver that verifies Bub-Signature as docs/PROTOCOL.md says and
// answers 500 then 200 (retried) or 400 (dead-lettered, as bub dlq
// list shows).
func TestWebhooksEndToEnd(t *testing.T) {
	t.Parallel()
	type call struct {
		repo    string
		attempt int
	}
	calls := make(chan call, 16)
	var mu sync.Mutex
	answered := map[string]int{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts, v1, _ := strings.Cut(strings.TrimPrefix(r.Header.Get("Bub-Signature"), "t="), ",v1=")
		if !hmac.Equal([]byte(v1), []byte(bustest.HMACHex("out-secret", ts+"."+string(body)))) {
			t.Errorf("Bub-Signature %q does not verify", r.Header.Get("Bub-Signature"))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var p protocol.ProcessMessageParams
		var payload struct {
			Body struct {
				Repository struct {
					FullName string `json:"full_name"`
				} `json:"repository"`
			} `json:"body"`
		}
		if json.Unmarshal(body, &p) != nil || json.Unmarshal(p.Payload, &payload) != nil {
			t.Errorf("delivery %s is not processMessage params with a hook's payload", body)
		}
		repo := payload.Body.Repository.FullName
		mu.Lock()
		answered[repo]++
		n := answered[repo]
		mu.Unlock()
		calls <- call{repo, p.Attempt}
		switch {
		case repo == "octo/flaky" && n == 1:
			w.WriteHeader(http.StatusInternalServerError)
		case repo == "octo/bad":
			w.WriteHeader(http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(receiver.Close)

	dir := t.TempDir()
	for name, secret := range map[string]string{"github.secret": "gh-secret\n", "out.secret": "out-secret\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config := filepath.Join(dir, "bub.yaml")
	if err := os.WriteFile(config, []byte(`retry_base_delay: 50ms
webhooks:
  in:
    - name: github
      scheme: github
      secret_file: github.secret
      topic: "webhook:github:{repository.full_name}"
      max_body_bytes: 4096
  out:
    - name: sink
      url: `+receiver.URL+`/hook
      pattern: "webhook:github:*"
      secret_file: out.secret
`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startBus(t, filepath.Join(dir, "data"), "--config", config, "--webhook-allow-private", "--log-level", "warn")

	post := func(path, body, delivery, secret string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", d.http+path, strings.NewReader(body))
		req.Header.Set("X-GitHub-Delivery", delivery)
		if secret != "" {
			req.Header.Set("X-Hub-Signature-256", "sha256="+bustest.HMACHex(secret, body))
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	repo := func(name string) string { return `{"repository":{"full_name":"` + name + `"}}` }
	for _, tt := range []struct {
		name, path, body, delivery, secret string
		status                             int
	}{
		{"signed", "/v1/hooks/github", repo("octo/ok"), "d-1", "gh-secret", 201},
		{"replayed", "/v1/hooks/github", repo("octo/ok"), "d-1", "gh-secret", 409},
		{"wrong secret", "/v1/hooks/github", repo("octo/evil"), "d-2", "guess", 401},
		{"unsigned", "/v1/hooks/github", repo("octo/evil"), "d-3", "", 401},
		{"no such field", "/v1/hooks/github", `{"zen":"x"}`, "d-4", "gh-secret", 400},
		{"too large", "/v1/hooks/github", repo(strings.Repeat("x", 5000)), "d-5", "gh-secret", 413},
		{"no such hook", "/v1/hooks/gitlab", repo("octo/ok"), "d-6", "gh-secret", 404},
		{"retried", "/v1/hooks/github", repo("octo/flaky"), "d-7", "gh-secret", 201},
		{"refused by the receiver", "/v1/hooks/github", repo("octo/bad"), "d-8", "gh-secret", 201},
	} {
		if status, body := post(tt.path, tt.body, tt.delivery, tt.secret); status != tt.status {
			t.Fatalf("%s: %d %s; want %d", tt.name, status, body, tt.status)
		}
	}
	got := map[string][]int{}
	timeout := time.After(bustest.Timeout)
	for len(got["octo/ok"]) < 1 || len(got["octo/flaky"]) < 2 || len(got["octo/bad"]) < 1 {
		select {
		case c := <-calls:
			got[c.repo] = append(got[c.repo], c.attempt)
		case <-timeout:
			t.Fatalf("the receiver got %v; want octo/ok once, octo/flaky twice, octo/bad once", got)
		}
	}
	if len(got) != 3 || len(got["octo/flaky"]) != 2 || got["octo/flaky"][1] != 2 || len(got["octo/bad"]) != 1 {
		t.Fatalf("the receiver got %v; want octo/flaky attempts 1 and 2, octo/bad once, nothing unsigned", got)
	}
	out, errOut, code := bub(t, []string{"BUB_BUS_URL=" + d.url}, "", "dlq", "list")
	if code != 0 || strings.Count(out, "webhook:github:") != 1 || !strings.Contains(out, "webhook:github:octo/bad") || !strings.Contains(out, "rejected") {
		t.Fatalf("bub dlq list: exit %d\n%s%s\nwant octo/bad alone, rejected", code, out, errOut)
	}
	// The admin's commands: list, add (delivering at once), remove.
	env := []string{"BUB_BUS_URL=" + d.url}
	if out, errOut, code := bub(t, env, "", "webhook", "list"); code != 0 || !strings.Contains(out, "sink") || !strings.Contains(out, "config") {
		t.Fatalf("bub webhook list: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := bub(t, env, "", "webhook", "add", "--name", "extra", "--url", receiver.URL+"/extra", "--pattern", "extra:*", "--secret-file", filepath.Join(dir, "out.secret")); code != 0 {
		t.Fatalf("bub webhook add: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := bub(t, env, "", "send-message", "--topic", "extra:1", "--payload", `{"type":"t"}`); code != 0 || !strings.Contains(out, `"processed":true`) {
		t.Fatalf("send-message to the added webhook: exit %d\n%s%s", code, out, errOut)
	}
	if c := <-calls; c.repo != "" || c.attempt != 1 {
		t.Fatalf("the added webhook got %+v", c)
	}
	if out, errOut, code := bub(t, env, "", "webhook", "remove", "extra"); code != 0 {
		t.Fatalf("bub webhook remove: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := bub(t, env, "", "webhook", "list", "--json"); code != 0 || strings.Contains(out, "extra") || strings.Contains(out, "out-secret") {
		t.Fatalf("bub webhook list after remove: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := bub(t, env, "", "webhook", "remove", "sink"); code != 1 || !strings.Contains(errOut, "configuration file") {
		t.Fatalf("bub webhook remove of the file's: exit %d %s; want 1 naming the configuration file", code, errOut)
	}
	if strings.Contains(d.stderr.String(), "gh-secret") || strings.Contains(d.stderr.String(), "out-secret") {
		t.Fatalf("bub serve logged a secret:\n%s", d.stderr)
	}
}

// TestConfigWebhooksSection checks the webhooks: section: read with its
// secrets from files beside the configuration, strict about keys (an
// unknown one is named with its line), a missing secret file named, and
// --print-config showing the file's path, never the secret.
func TestConfigWebhooksSection(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gh.secret"), []byte("  s3cret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(text string) (*configFile, error) {
		_, fs := newServeFlags(stdio{err: io.Discard})
		_, scratch := newServeFlags(stdio{err: io.Discard})
		return parseConfigFile(filepath.Join(dir, "bub.yaml"), []byte(text), fs, scratch, map[string]bool{})
	}
	good := "webhooks:\n  in:\n    - name: gh\n      scheme: github\n      secret_file: gh.secret\n      topic: \"webhook:{a}\"\n      tolerance: 2m\n"
	cf, err := load(good)
	if err != nil {
		t.Fatal(err)
	}
	hooks, _, err := loadWebhooks(cf)
	if err != nil || len(hooks) != 1 || string(hooks[0].Secret) != "s3cret-value" || hooks[0].Tolerance != 2*time.Minute {
		t.Fatalf("loadWebhooks: %+v, %v; want the hook with the file's secret, trimmed", hooks, err)
	}
	var out strings.Builder
	_, fs := newServeFlags(stdio{err: io.Discard})
	if err := printConfig(&out, fs, cf); err != nil || !strings.Contains(out.String(), "secret_file: gh.secret") || strings.Contains(out.String(), "s3cret") {
		t.Fatalf("print-config: %v\n%s", err, out.String())
	}
	if _, err := load("webhooks:\n  in:\n    - name: gh\n      secert_file: gh.secret\n"); err == nil || !strings.Contains(err.Error(), "bub.yaml:4") || !strings.Contains(err.Error(), "secert_file") {
		t.Fatalf("a misspelt key: %v; want it named with its line", err)
	}
	cf, err = load(strings.Replace(good, "gh.secret", "missing.secret", 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadWebhooks(cf); err == nil || !strings.Contains(err.Error(), "webhooks.in[0] (gh)") || !strings.Contains(err.Error(), "missing.secret") {
		t.Fatalf("a missing secret file: %v; want it named", err)
	}
}

// TestWebhookAddRefusesWhatTheBusWouldNotCall: bub webhook add of a
// loopback URL on a bus without --webhook-allow-private fails at once,
// naming the flag, instead of printing "added" for a subscription whose
// every delivery would be dead-lettered.
func TestWebhookAddRefusesWhatTheBusWouldNotCall(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir())
	secret := writeFile(t, t.TempDir(), "hook.secret", "s3cret-value\n")
	out, errOut, code := bub(t, []string{"BUB_BUS_URL=" + d.url}, "", "webhook", "add", "--name", "rx", "--url", "http://127.0.0.1:18319/hook", "--pattern", "rx:*", "--secret-file", secret)
	assert.Equal(t, 1, code, "stdout: %s", out)
	assert.Empty(t, out)
	oneLine(t, errOut, "bub webhook add: ")
	for _, want := range []string{`"rx"`, "127.0.0.1", "--webhook-allow-private"} {
		assert.Contains(t, errOut, want)
	}
	assert.NotContains(t, errOut, "s3cret-value")
}
