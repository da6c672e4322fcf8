package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// TestHTTPIdempotencySurvivesKill publishes over HTTP with an
// Idempotency-Key, kills bub serve with SIGKILL, restarts it on the same
// data directory, retries the same request, and checks that the retry
// got the first answer and that the subscriber gets the message exactly
// once.
func TestHTTPIdempotencySurvivesKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startBus(t, dir, "--log-level", "warn")
	body := `{"topic":"agent:absent","payload":{"type":"job","n":1},"clientId":"cron"}`
	post := func(d *daemon, body, key string) (int, string, http.Header) {
		t.Helper()
		var header map[string]string
		if key != "" {
			header = map[string]string{"Idempotency-Key": key}
		}
		status, h, b := bustest.Post(t, d.http+"/v1/messages", body, header)
		var a struct {
			MessageID string `json:"messageId"`
		}
		_ = json.Unmarshal(b, &a)
		return status, a.MessageID, h
	}
	status, first, _ := post(d, body, "job-1")
	if status != 201 || first == "" {
		t.Fatalf("first POST: %d %q", status, first)
	}
	d.kill() // SIGKILL: no drain, no clean close of the store

	d = startBus(t, dir, "--log-level", "warn")
	status, again, header := post(d, body, "job-1")
	if status != 201 || again != first || header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after the kill: %d %q replayed=%q; want 201 %q replayed", status, again, header.Get("Idempotent-Replayed"), first)
	}
	// A marker, held after the retry, so the bus has two held messages if
	// the retry published, and one more with the marker.
	status, marker, _ := post(d, `{"topic":"agent:absent","payload":{"type":"marker"},"clientId":"cron"}`, "")
	if status != 201 {
		t.Fatalf("marker: %d", status)
	}
	// Since the restart, the bus published the marker and nothing else.
	if n := publishedSince(t, d); n != 1 {
		t.Fatalf("bub_messages_published_total is %v after the retry and the marker; want 1 (the marker)", n)
	}
	got := make(chan string, 16)
	bustest.Connect(t, d.url, "absent", func(p protocol.ProcessMessageParams) any {
		got <- p.MessageID
		return protocol.ProcessMessageResult{Processed: true}
	}).Subscribe("agent:absent", "")
	seen := map[string]int{}
	timeout := time.After(bustest.Timeout)
	for seen[first] == 0 || seen[marker] == 0 {
		select {
		case id := <-got:
			seen[id]++
		case <-timeout:
			t.Fatalf("delivered %v; want %s and the marker %s", seen, first, marker)
		}
	}
	if len(seen) != 2 || seen[first] != 1 {
		t.Fatalf("delivered %v; want %s once and the marker %s", seen, first, marker)
	}
}

// publishedSince sums bub_messages_published_total on d's /metrics: the
// messages it accepted since it started.
func publishedSince(t *testing.T, d *daemon) float64 {
	t.Helper()
	res, err := http.Get(d.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "bub_messages_published_total{"); ok {
			_, value, _ := strings.Cut(rest, "} ")
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// TestHTTPPublishStatusesBinary sends POST /v1/messages to the real bub
// serve, with auth, a small --max-message-bytes and a publish rate of
// two messages, and checks every status the HTTP binding documents
// (docs/PROTOCOL.md, "POST /v1/messages") with its error code; 503 is
// TestServeDrain's.
func TestHTTPPublishStatusesBinary(t *testing.T) {
	t.Parallel()
	const token = "statuses-token-0123456789abcdef"
	dir := t.TempDir()
	config := writeFile(t, dir, "bus.yaml", `auth:
  identities:
    - name: cron
      token_sha256: "`+hashToken(token)+`"
      client_ids: ["cron"]
      publish: {allow: ["jobs:*"]}
`)
	d := startBus(t, filepath.Join(dir, "data"), "--config", config, "--log-level", "warn",
		"--max-message-bytes", "2048", "--publish-rate", "0.001", "--publish-burst", "2")
	bearer := map[string]string{"Authorization": "Bearer " + token}
	with := func(h map[string]string) map[string]string {
		out := map[string]string{"Authorization": "Bearer " + token}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	job := `{"topic":"jobs:a","payload":{"type":"job"}}`
	for _, tt := range []struct {
		name   string
		body   string
		header map[string]string
		status int
		code   int64
	}{
		{"no credential", job, nil, 401, protocol.CodeUnauthorized},
		{"unknown token", job, map[string]string{"Authorization": "Bearer nope"}, 401, protocol.CodeUnauthorized},
		{"not Bearer", job, map[string]string{"Authorization": "Basic Y3Jvbjp4"}, 401, protocol.CodeUnauthorized},
		{"not JSON", `{"topic":`, bearer, 400, protocol.CodeParseError},
		{"no payload type", `{"topic":"jobs:a","payload":{}}`, bearer, 400, protocol.CodeInvalidParams},
		{"bad idempotency key", job, with(map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}), 400, protocol.CodeInvalidParams},
		{"too large", `{"topic":"jobs:a","payload":{"type":"job","pad":"` + strings.Repeat("x", 2100) + `"}}`, bearer, 413, protocol.CodeLimitReached},
		{"topic outside the grant", `{"topic":"admin:x","payload":{"type":"job"}}`, bearer, 403, protocol.CodeForbidden},
		{"clientId outside the grant", `{"topic":"jobs:a","payload":{"type":"job"},"clientId":"other"}`, bearer, 403, protocol.CodeForbidden},
		{"cross-site browser", job, with(map[string]string{"Origin": "https://evil.example"}), 403, protocol.CodeForbidden},
		{"first with a key", job, with(map[string]string{"Idempotency-Key": "k1"}), 201, 0},
		{"repeat with the key", job, with(map[string]string{"Idempotency-Key": "k1"}), 201, 0},
		{"the key, another body", `{"topic":"jobs:b","payload":{"type":"job"}}`, with(map[string]string{"Idempotency-Key": "k1"}), 409, protocol.CodeInvalidParams},
		{"second of the burst", job, bearer, 201, 0},
		{"over the publish rate", job, bearer, 429, protocol.CodeRateLimited},
	} {
		status, header, body := bustest.Post(t, d.http+"/v1/messages", tt.body, tt.header)
		var answer struct {
			MessageID string          `json:"messageId"`
			Error     *protocol.Error `json:"error"`
		}
		if err := json.Unmarshal(body, &answer); err != nil {
			t.Errorf("%s: answer %s is not JSON: %v", tt.name, body, err)
			continue
		}
		switch {
		case status != tt.status:
			t.Errorf("%s: %d %s; want %d", tt.name, status, body, tt.status)
		case tt.status == 201 && answer.MessageID == "":
			t.Errorf("%s: 201 without messageId: %s", tt.name, body)
		case tt.status != 201 && (answer.Error == nil || answer.Error.Code != tt.code):
			t.Errorf("%s: %s; want code %d", tt.name, body, tt.code)
		case tt.status == 401 && header.Get("WWW-Authenticate") == "":
			t.Errorf("%s: 401 without WWW-Authenticate", tt.name)
		case tt.status == 429:
			if s, err := strconv.Atoi(header.Get("Retry-After")); err != nil || s < 1 {
				t.Errorf("%s: Retry-After %q; want seconds", tt.name, header.Get("Retry-After"))
			}
		}
	}
}
