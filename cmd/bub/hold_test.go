package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/protocol"
)

// TestHoldLifetimeAcrossRestart: a message to an absent agent waits for
// --hold-lifetime, not for the retry schedule (here exhausted in tens of
// milliseconds), and a restart of bub serve does not renew the wait: it is
// counted from the publish.
func TestHoldLifetimeAcrossRestart(t *testing.T) {
	const lifetime = 3 * time.Second
	dir := t.TempDir()
	flags := []string{"--hold-lifetime", lifetime.String(), "--max-attempts", "2", "--retry-base-delay", "10ms"}
	d := startBus(t, dir, flags...)
	env := []string{"BUB_BUS_URL=" + d.url}
	published := time.Now()
	out, errOut, code := bub(t, env, "", "send-message", "--topic", "agent:ghost-1", "--payload", `{"type":"task_request"}`)
	if code != 0 {
		t.Fatalf("send-message: exit %d: %s%s", code, out, errOut)
	}
	var res protocol.SendMessageResult
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &res); err != nil {
		t.Fatalf("send-message output %q: %v", out, err)
	}
	next, err := time.Parse(time.RFC3339Nano, res.NextAttempt)
	if !res.Held || err != nil || next.Sub(published) < lifetime-time.Second {
		t.Fatalf("result %+v: want held, next_attempt at the end of the %s lifetime", res, lifetime)
	}
	d.stop(t)

	// Restart halfway through the lifetime: counted from the restart, the
	// wait would end at 1.5 s + 3 s.
	time.Sleep(time.Until(published.Add(lifetime / 2)))
	d = startBus(t, dir, flags...)
	env = []string{"BUB_BUS_URL=" + d.url}
	var list protocol.DLQListResult
	pollFor(t, "the held message to be dead-lettered", func() bool {
		out, errOut, code := bub(t, env, "", "dlq", "list", "--json")
		if code != 0 {
			t.Fatalf("dlq list: exit %d: %s%s", code, out, errOut)
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("dlq list output %q: %v", out, err)
		}
		return len(list.Entries) > 0
	})
	e := list.Entries[0]
	if e.Topic != "agent:ghost-1" || e.Reason != protocol.ReasonNoSubscribers {
		t.Errorf("dead letter %+v: want agent:ghost-1, no_subscribers", e)
	}
	waited := e.DeadAt.Sub(published)
	if waited < lifetime || waited > lifetime+time.Second {
		t.Errorf("dead-lettered %s after the publish; want the %s lifetime, counted from the publish", waited, lifetime)
	}
}
