// Package checkfor waits in tests for a condition that other goroutines
// or processes bring about, when no event or channel says so: it asks
// again and again until the answer is yes or the time runs out, and a
// test that gives up says what it saw last.
//
// Prefer waiting on the event itself (a delivery on a channel, a journal
// event, a hook): it ends the wait at the moment the thing happens and
// says nothing about time. Use Check where the only way to know is to
// look: a metric, a status page, a port that must come free.
//
// The timeout is a safety net for a test that would otherwise hang, not
// a measure: no assertion may depend on how soon the condition held.
package checkfor

import (
	"testing"
	"time"

	"github.com/bub-bus/bub/internal/backoff"
)

// The pause between two looks starts short, so that a condition that is
// nearly true is seen at once, and doubles up to a cap, so that a long
// wait does not take a core from the goroutines it is waiting for on a
// loaded machine.
const (
	firstPause = time.Millisecond
	maxPause   = 50 * time.Millisecond
)

// Check calls f until it returns nil, pausing briefly between calls. If
// f still returns an error when timeout has passed, Check fails the test
// with that last error, so that the failure says what was last seen:
// f's error should name the condition and the state it found, as in
// fmt.Errorf("readyz answered %d %q, want 503", code, body).
//
// f is called at least once and once more at the timeout. Like
// t.Fatal, Check must be called from the goroutine running the test.
func Check(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	if err := Wait(timeout, f); err != nil {
		t.Fatalf("%v (still so after %v)", err, timeout)
	}
}

// Wait is Check for callers that are not a test, or that must do more
// than fail: it returns nil once f returns nil, or f's last error when
// timeout has passed.
func Wait(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for try := 0; ; try++ {
		err := f()
		if err == nil {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		time.Sleep(min(backoff.Exponential(firstPause, maxPause, try), left))
	}
}
