package streak

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder keeps the summaries a Log reports.
type recorder struct {
	mu   sync.Mutex
	got  []string
	sums []Summary
}

func (r *recorder) summary(key string, s Summary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, key)
	r.sums = append(r.sums, s)
}

func (r *recorder) take() ([]string, []Summary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	got, sums := r.got, r.sums
	r.got, r.sums = nil, nil
	return got, sums
}

// A flood of events is one first line, then one summary per period with
// the count, per key; a quiet period ends the run, and the next event is
// a first line again.
func TestRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		l := New(10*time.Second, rec.summary)
		defer l.Stop()
		start := time.Now()

		firsts := 0
		for range 1000 {
			if l.Add("max_connections") {
				firsts++
			}
		}
		if !l.Add("other") {
			t.Fatal("another key's first event did not begin a run")
		}
		if firsts != 1 {
			t.Fatalf("%d first lines for one run, want 1", firsts)
		}
		synctest.Wait()
		if got, _ := rec.take(); len(got) != 0 {
			t.Fatalf("summaries before the period ended: %v", got)
		}

		time.Sleep(10 * time.Second) // the bubble's fake time
		synctest.Wait()
		got, sums := rec.take()
		if len(got) != 1 || got[0] != "max_connections" || sums[0] != (Summary{Events: 999, Total: 1000, Since: start}) {
			t.Fatalf("after a period: %v %+v, want one summary of max_connections: 999 more, 1000 in all", got, sums)
		}

		// Events go on: the next period's summary counts them alone.
		for range 5 {
			if l.Add("max_connections") {
				t.Fatal("an event of a run that goes on began a new one")
			}
		}
		time.Sleep(10 * time.Second) // the bubble's fake time
		synctest.Wait()
		got, sums = rec.take()
		if len(got) != 1 || sums[0].Events != 5 || sums[0].Total != 1005 {
			t.Fatalf("second period: %v %+v", got, sums)
		}

		// A quiet period ends the run, with no line.
		time.Sleep(10 * time.Second) // the bubble's fake time
		synctest.Wait()
		if got, _ := rec.take(); len(got) != 0 {
			t.Fatalf("a quiet period reported: %v", got)
		}
		if !l.Add("max_connections") {
			t.Fatal("the first event after a quiet period did not begin a run")
		}
	})
}

// Stop reports what is counted and not yet said, and hides nothing after.
func TestStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		l := New(time.Minute, rec.summary)
		l.Add("k")
		l.Add("k")
		l.Stop()
		if got, sums := rec.take(); len(got) != 1 || sums[0].Events != 1 || sums[0].Total != 2 {
			t.Fatalf("Stop reported %v %+v", got, sums)
		}
		if !l.Add("k") || !l.Add("k") {
			t.Fatal("an event after Stop was hidden")
		}
	})
}
