package spawner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
	"github.com/bub-bus/bub/spawner"
)

// These tests run the real spawner on a real bus and read the bus's own
// record of each routing (the dead letter's attempts) to check that the
// bus came back no sooner than the spawner asked. Before the bus honoured
// it, all five attempts were spent within milliseconds.

// deadLetter waits until the bus has dead-lettered the message on topic,
// and returns it.
func (h *harness) deadLetter(t *testing.T, topic string) *store.DeadLetter {
	t.Helper()
	var found *store.DeadLetter
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, _, err := h.bus.Store.ListDeadLetters(store.Filter{Topic: topic}, "", 10)
		require.NoError(c, err, "list dead letters")
		require.NotEmpty(c, list, "the dead letter of "+topic)
		found = list[0]
	}, wait, 10*time.Millisecond)
	return found
}

// logAttempts logs when each attempt came, counted from the first.
func logAttempts(t *testing.T, d *store.DeadLetter) {
	t.Helper()
	for i, a := range d.Attempts {
		t.Logf("attempt %d at +%s: %s", i+1, a.At.Sub(d.Attempts[0].At).Round(time.Millisecond), a.Error)
	}
}

// TestCrashLoopWaitsForTheBackoff: an agent command that fails at once
// makes the spawner back off, longer after each failure in a row; the bus
// routes the message again only when the backoff allows a start, so the
// spawner never has to answer "backing off".
func TestCrashLoopWaitsForTheBackoff(t *testing.T) {
	t.Parallel()
	const restartDelay, restartDelayMax = 200 * time.Millisecond, time.Second
	const lifetime = 3 * time.Second
	h := newHarness(t,
		spawner.Options{Command: []string{"false"}, RestartDelay: restartDelay, RestartDelayMax: restartDelayMax},
		&bus.Options{HoldLifetime: lifetime, RetryBaseDelay: 100 * time.Millisecond})
	res := h.send(t, "tg:20", chat("hello?"))
	if len(res.Acks) != 1 || !res.Acks[0].Retrying {
		t.Fatalf("acks %+v: want the spawner's, retrying", res.Acks)
	}
	d := h.deadLetter(t, "tg:20")
	if d.Reason != protocol.ReasonNoSubscribers {
		t.Errorf("reason %q, want %q", d.Reason, protocol.ReasonNoSubscribers)
	}
	logAttempts(t, d)
	routings := d.Attempts[:len(d.Attempts)-1] // the last is the lifetime's end
	if len(routings) < 4 {
		t.Fatalf("%d routings in %s, want at least 4: %+v", len(routings), lifetime, d.Attempts)
	}
	for i, a := range routings {
		if strings.Contains(a.Error, "backing off") {
			t.Errorf("routing %d came while the spawner was backing off: %q", i+1, a.Error)
		}
	}
	// After the n-th failure in a row the spawner starts nothing for 0
	// (n = 1), then restartDelay, doubling, up to restartDelayMax.
	backoff := func(n int) time.Duration {
		if n <= 1 {
			return 0
		}
		return min(restartDelay<<(n-2), restartDelayMax)
	}
	for n := 1; n < len(routings); n++ {
		if gap := routings[n].At.Sub(routings[n-1].At); gap < backoff(n) {
			t.Errorf("routing %d came %s after routing %d; the spawner's backoff was %s", n+1, gap, n, backoff(n))
		}
	}
	if lived := d.DeadAt.Sub(d.Attempts[0].At); lived < lifetime {
		t.Errorf("dead-lettered after %s, before the hold lifetime of %s", lived, lifetime)
	}
}
