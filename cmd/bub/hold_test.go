package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	out, errOut, code := bub(t, env, "", "send-message", "--topic", "agent:ghost-1", "--payload", `{"type":"task_request"}`)
	if code != 0 {
		t.Fatalf("send-message: exit %d: %s%s", code, out, errOut)
	}
	var res protocol.SendMessageResult
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &res); err != nil {
		t.Fatalf("send-message output %q: %v", out, err)
	}
	next, err := time.Parse(time.RFC3339Nano, res.NextAttempt)
	if !res.Held || err != nil || time.Until(next) < lifetime/2 {
		t.Fatalf("result %+v: want held, next_attempt at the end of the %s lifetime", res, lifetime)
	}
	d.stop(t)

	// Restart halfway through the lifetime, as the bus counts it from the
	// publish (next_attempt is its end): counted from the restart, the
	// wait would end a lifetime after restarting.
	time.Sleep(time.Until(next.Add(-lifetime / 2))) // the behaviour under test: time passing while the bus is down
	restarting := time.Now()
	d = startBus(t, dir, flags...)
	ready := time.Now()
	env = []string{"BUB_BUS_URL=" + d.url}
	var list protocol.DLQListResult
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, errOut, code := bub(t, env, "", "dlq", "list", "--json")
		require.Zero(c, code, "dlq list: %s%s", out, errOut)
		require.NoError(c, json.Unmarshal([]byte(out), &list), "dlq list output %q", out)
		require.NotEmpty(c, list.Entries, "the held message to be dead-lettered")
	}, 20*time.Second, 20*time.Millisecond)
	e := list.Entries[0]
	if e.Topic != "agent:ghost-1" || e.Reason != protocol.ReasonNoSubscribers {
		t.Errorf("dead letter %+v: want agent:ghost-1, no_subscribers", e)
	}
	t.Logf("published at %s, restarted after %s (ready after %s), dead-lettered after %s", e.FirstAttempt.Format(time.RFC3339Nano),
		restarting.Sub(e.FirstAttempt), ready.Sub(e.FirstAttempt), e.DeadAt.Sub(e.FirstAttempt))
	if waited := e.DeadAt.Sub(e.FirstAttempt); waited < lifetime {
		t.Errorf("dead-lettered %s after the publish, before the %s lifetime ended", waited, lifetime)
	}
	if !e.DeadAt.Before(restarting.Add(lifetime)) {
		t.Errorf("dead-lettered at %s, a lifetime after the restart at %s: the restart renewed the wait", e.DeadAt, restarting)
	}
	// A bus slow to come back (a loaded machine) dead-letters at once.
	if due := later(e.FirstAttempt.Add(lifetime), ready); e.DeadAt.After(due.Add(time.Second)) {
		t.Errorf("dead-lettered at %s, well after it was due at %s", e.DeadAt, due)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
