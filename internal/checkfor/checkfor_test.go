package checkfor_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bub-bus/bub/internal/checkfor"
)

// fakeT records what Check reports instead of ending the test.
type fakeT struct {
	testing.TB
	failures []string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

func TestCheckReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		ft := &fakeT{TB: t}
		checkfor.Check(ft, time.Minute, func() error {
			calls++
			if calls < 4 {
				return errors.New("not yet")
			}
			return nil
		})
		if len(ft.failures) > 0 || calls != 4 {
			t.Fatalf("Check failed %q after %d calls, want no failure after 4", ft.failures, calls)
		}
	})
}

// TestCheckFailsWithTheLastError: the failure carries what f said on its
// last call, made at the timeout, not an earlier or a generic message.
func TestCheckFailsWithTheLastError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		var last time.Duration
		ft := &fakeT{TB: t}
		checkfor.Check(ft, 3*time.Second, func() error {
			calls++
			last = time.Since(start)
			return fmt.Errorf("readyz answered 200 on call %d", calls)
		})
		want := fmt.Sprintf("readyz answered 200 on call %d (still so after 3s)", calls)
		if len(ft.failures) != 1 || ft.failures[0] != want {
			t.Fatalf("failures %q, want [%q]", ft.failures, want)
		}
		if last != 3*time.Second {
			t.Errorf("the last call came %v after the start, want at the 3s timeout", last)
		}
	})
}

func TestCheckCallsOnceWithNoTime(t *testing.T) {
	t.Parallel()
	calls := 0
	ft := &fakeT{TB: t}
	checkfor.Check(ft, 0, func() error {
		calls++
		return errors.New("never")
	})
	if calls != 1 || len(ft.failures) != 1 || !strings.HasPrefix(ft.failures[0], "never") {
		t.Fatalf("%d calls, failures %q; want 1 call and a failure saying never", calls, ft.failures)
	}
}

// TestWaitSeesAChangeSoon: however long the wait has gone on, the pause
// between looks stays short, so a condition is seen soon after it holds.
func TestWaitSeesAChangeSoon(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		const holdsAt = 7 * time.Second
		err := checkfor.Wait(time.Minute, func() error {
			if time.Since(start) < holdsAt {
				return errors.New("not yet")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen := time.Since(start) - holdsAt; seen > 50*time.Millisecond {
			t.Errorf("the condition held for %v before Wait saw it, want at most 50ms", seen)
		}
	})
}

func TestWaitReturnsTheLastError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		err := checkfor.Wait(time.Second, func() error {
			calls++
			return fmt.Errorf("call %d", calls)
		})
		if want := fmt.Sprintf("call %d", calls); err == nil || err.Error() != want || calls < 2 {
			t.Fatalf("Wait returned %v after %d calls, want %q from more than one call", err, calls, want)
		}
	})
}
