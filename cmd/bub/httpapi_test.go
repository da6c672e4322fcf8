package main

import (
	"encoding/json"
	"io"
	"net/http"
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
		req, err := http.NewRequest("POST", d.http+"/v1/messages", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var a struct {
			MessageID string `json:"messageId"`
		}
		_ = json.Unmarshal(b, &a)
		return res.StatusCode, a.MessageID, res.Header
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
	// A marker, held after the retry: once it arrives, every message held
	// before it has too.
	status, marker, _ := post(d, `{"topic":"agent:absent","payload":{"type":"marker"},"clientId":"cron"}`, "")
	if status != 201 {
		t.Fatalf("marker: %d", status)
	}
	got := make(chan string, 16)
	bustest.Connect(t, d.url, "absent", func(p protocol.ProcessMessageParams) any {
		got <- p.MessageID
		return protocol.ProcessMessageResult{Processed: true}
	}).Subscribe("agent:absent", "")
	var ids []string
	timeout := time.After(bustest.Timeout)
	for len(ids) == 0 || ids[len(ids)-1] != marker {
		select {
		case id := <-got:
			ids = append(ids, id)
		case <-timeout:
			t.Fatalf("delivered %v; the marker %s never came", ids, marker)
		}
	}
	if len(ids) != 2 || ids[0] != first {
		t.Fatalf("delivered %v; want %s once, then the marker %s", ids, first, marker)
	}
}
