package main

import (
	"bytes"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
)

// TestReckon: every accepted id is delivered, dead-lettered or vanished;
// redeliveries, messages published twice and ids the publisher never
// learnt are counted apart; a message never accepted fails the run.
func TestReckon(t *testing.T) {
	l := newLedger()
	l.accept("m1", 1, "")
	l.deliver("m1", 1)
	l.deliver("m1", 1)       // its ack was lost: delivered again
	l.accept("m2", 2, "")    // dead-lettered
	l.accept("m3", 3, "[a]") // vanished
	l.accept("m4", 4, "")
	l.deliver("m4", 4)
	l.deliver("m4x", 4) // an earlier publish of 4 whose answer was lost
	assert.ElementsMatch(t, []string{"m2", "m3"}, l.missing())

	a := l.reckon(5, map[string]string{"m2": "max_retries", "m9": "max_retries"})
	assert.Equal(t, 4, a.Accepted)
	assert.Equal(t, 2, a.Delivered)
	assert.Equal(t, map[string]int{"max_retries": 1}, a.DeadByWhy)
	assert.Equal(t, []string{"m3 (seq 3, answered [a])"}, a.Vanished)
	assert.Equal(t, []int{5}, a.Unpublished)
	assert.Equal(t, 1, a.Redeliveries)
	assert.Equal(t, 1, a.RedeliverIDs)
	assert.Equal(t, 1, a.Republished)
	assert.Equal(t, 1, a.Unacknowledged)
	assert.False(t, a.ok())
	var out bytes.Buffer
	a.print(&out)
	assert.Contains(t, out.String(), "vanished: m3 (seq 3, answered [a])")
	assert.Contains(t, out.String(), "never accepted: 1 load messages, first seq 5")

	whole := newLedger()
	whole.accept("m1", 1, "")
	whole.deliver("m1", 1)
	assert.True(t, whole.reckon(1, nil).ok())
}

// TestRunAgainstOneNode: the load program against a real bus (one node,
// in this process) publishes, sees every message delivered and passes.
func TestRunAgainstOneNode(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config{busURL: srv.URL + "," + srv.URL, topic: "agent:loadtest", messages: 60, duration: time.Second, workers: 4, drain: 10 * time.Second}
	calm := make(chan struct{})
	close(calm)
	a, err := run(t.Context(), cfg, calm, quiet)
	require.NoError(t, err)
	assert.True(t, a.ok(), "%+v", a)
	assert.Equal(t, 60, a.Accepted)
	assert.Equal(t, 60, a.Delivered)
	assert.Zero(t, a.Redeliveries)
}

// TestDrainCountsFromCalm: with -wait-calm the drain ends -drain after
// the later of the load's end and the signal that the disruptions are
// over, so restarts that outlast the load do not eat the drain.
func TestDrainCountsFromCalm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config{duration: time.Second, drain: 2 * time.Second}
		started := time.Now()
		calm := make(chan struct{})
		bound, cancel := drainBound(t.Context(), cfg, started, calm)
		defer cancel()
		time.Sleep(5 * time.Second) // the bubble's fake time
		synctest.Wait()
		require.NoError(t, bound.Err(), "ended before the disruptions were over")
		close(calm)
		time.Sleep(2*time.Second - time.Nanosecond) // the bubble's fake time
		synctest.Wait()
		require.NoError(t, bound.Err(), "ended before -drain passed since the calm")
		time.Sleep(time.Nanosecond) // the bubble's fake time
		synctest.Wait()
		require.Error(t, bound.Err())

		// Calm before the load's end: the drain counts from the end.
		early := make(chan struct{})
		close(early)
		start := time.Now()
		bound2, cancel2 := drainBound(t.Context(), cfg, start, early)
		defer cancel2()
		<-bound2.Done()
		assert.Equal(t, 3*time.Second, time.Since(start))
	})
}
