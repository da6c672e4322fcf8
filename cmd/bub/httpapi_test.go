package main

import (
	"encoding/json"
	"io"
	"net/http"
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
