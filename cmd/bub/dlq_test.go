package main

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// TestDLQCommands drives bub dlq against a running bub serve: list (table
// and JSON, filters, pages), show, replay to a topic and to a subscriber,
// and purge.
func TestDLQCommands(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir(), "--max-attempts", "1")
	env := []string{"BUB_BUS_URL=" + d.url}
	var accept atomic.Bool
	got := make(chan string, 10)
	worker := bustest.Connect(t, d.url, "worker", func(p protocol.ProcessMessageParams) any {
		if !accept.Load() {
			return protocol.ProcessMessageResult{ShouldRetry: true, Message: "busy"}
		}
		got <- p.MessageID
		return protocol.ProcessMessageResult{Processed: true}
	})
	worker.Subscribe("jobs:*", "")
	pub := bustest.Connect(t, d.url, "pub", nil)
	for _, topic := range []string{"jobs:1", "jobs:2", "jobs:3", "jobs:4"} {
		pub.Publish(topic, "job")
	}

	run := func(want int, args ...string) string {
		t.Helper()
		out, errOut, code := bub(t, env, "", append([]string{"dlq"}, args...)...)
		if code != want {
			t.Fatalf("bub dlq %v: exit %d, want %d: %s%s", args, code, want, out, errOut)
		}
		return out
	}

	table := run(0, "list")
	if !strings.Contains(table, "ID") || !strings.Contains(table, "REASON") || strings.Count(table, "max_retries") != 4 {
		t.Fatalf("list table:\n%s", table)
	}
	var page protocol.DLQListResult
	if err := json.Unmarshal([]byte(run(0, "list", "--json", "--limit", "3")), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 3 || page.NextCursor == "" {
		t.Fatalf("first page: %d entries, cursor %q", len(page.Entries), page.NextCursor)
	}
	if next := run(0, "list", "--cursor", page.NextCursor); !strings.Contains(next, "jobs:4") || strings.Contains(next, "jobs:1") {
		t.Errorf("second page:\n%s", next)
	}
	if out := run(0, "list", "--topic", "jobs:2"); strings.Count(out, "jobs:") != 1 {
		t.Errorf("filtered list:\n%s", out)
	}
	if out := run(0, "list", "--reason", "rejected"); !strings.Contains(out, "no dead letters") {
		t.Errorf("empty list:\n%s", out)
	}
	ids := make([]string, len(page.Entries))
	for i, e := range page.Entries {
		ids[i] = e.ID
	}

	show := run(0, "show", ids[0])
	for _, want := range []string{ids[0], "max_retries", "jobs:1", "worker", "should_retry: busy", `"type": "job"`} {
		if !strings.Contains(show, want) {
			t.Errorf("show lacks %q:\n%s", want, show)
		}
	}
	if _, errOut, code := bub(t, env, "", "dlq", "show", "d-999999"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("show of a missing id: exit %d, %s", code, errOut)
	}

	accept.Store(true)
	if out := run(0, "replay", ids[0], "--to", "subscriber"); !strings.Contains(out, "scheduled for its subscriber") {
		t.Errorf("replay to subscriber: %s", out)
	}
	if out := run(0, "replay", ids[1]); !strings.Contains(out, "routed to 1 subscriber") {
		t.Errorf("replay to topic: %s", out)
	}
	for range 2 {
		select {
		case <-got:
		case <-time.After(bustest.Timeout):
			t.Fatal("the replayed messages did not reach the worker")
		}
	}
	if out := run(1, "replay", "d-999999"); !strings.Contains(out, "not replayed") {
		t.Errorf("replay of a missing id: %s", out)
	}

	// In the CLI's words: --all, not the wire's "all: true".
	if _, errOut, code := bub(t, env, "", "dlq", "purge"); code != 2 || !strings.Contains(errOut, "--all") || strings.Contains(errOut, "all: true") {
		t.Errorf("empty purge: exit %d: %s", code, errOut)
	}
	if out := run(0, "purge", ids[2]); out != "purged 1\n" {
		t.Errorf("purge one: %q", out)
	}
	if out := run(0, "purge", "--all"); out != "purged 1\n" {
		t.Errorf("purge all: %q", out)
	}
	if out := run(0, "list"); !strings.Contains(out, "no dead letters") {
		t.Errorf("after purge:\n%s", out)
	}
	if _, _, code := bub(t, env, "", "dlq", "frobnicate"); code != 2 {
		t.Errorf("unknown subcommand: exit %d", code)
	}
}
