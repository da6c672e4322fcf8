package bus

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// TestWakeHoldsByTopic: a subscription wakes exactly the holds whose
// topic it matches, found through the topic index whatever the kind of
// pattern, except those its own client asked to wait; the woken holds
// fall due in the order they were stored.
func TestWakeHoldsByTopic(t *testing.T) {
	holds := []struct {
		topic, askedBy string
	}{
		{"agent:a", ""},     // p-1
		{"agent:b", ""},     // p-2
		{"agent:ab", ""},    // p-3
		{"team:a", ""},      // p-4
		{"agent:a", "x"},    // p-5
		{"agent:a", ""},     // p-6
		{"agent:", ""},      // p-7
		{"agents:a", ""},    // p-8
		{"team:a-b", ""},    // p-9
		{"zz:agent:a", ""},  // p-10
		{"agent:b", "spaw"}, // p-11
	}
	tests := []struct {
		pattern, client string
		woken           []int // in the order they fall due
	}{
		{"agent:a", "x", []int{1, 6}},
		{"agent:a", "y", []int{1, 5, 6}},
		{"agent:", "z", []int{1, 2, 3, 5, 6, 7, 11}},
		{"team:a-", "z", []int{9}},
		{"agent:?", "spaw", []int{1, 2, 5, 6}},
		{"*:a", "z", []int{1, 4, 5, 6, 8, 10}},
		{"agent*b", "z", []int{2, 3, 11}},
		{"nobody", "z", nil},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"/"+tt.client, func(t *testing.T) {
			q := newScheduler(nil)
			later := time.Now().Add(time.Hour)
			// Added out of id order, as a restart or a reschedule may.
			for i := len(holds) - 1; i >= 0; i-- {
				h := holds[i]
				q.add(&store.Pending{ID: fmt.Sprintf("p-%012d", i+1), Kind: store.KindHold, AskedBy: h.askedBy, NextAt: later,
					Message: store.Message{Topic: h.topic, Payload: []byte(`{"dropped":true}`)}})
			}
			q.add(&store.Pending{ID: "p-000000000099", Kind: store.KindRetry, ClientID: "c", Subscription: "agent:a", NextAt: later,
				Message: store.Message{Topic: "agent:a"}})
			pattern, err := protocol.ParsePattern(tt.pattern)
			require.NoError(t, err)
			q.wakeHolds(pattern, tt.client)

			q.mu.Lock()
			defer q.mu.Unlock()
			var woken []int
			for {
				p, _ := q.next(time.Now())
				if p == nil {
					break
				}
				assert.Nil(t, p.Message.Payload, "the store has it")
				var n int
				_, err := fmt.Sscanf(p.ID, "p-%d", &n)
				require.NoError(t, err)
				woken = append(woken, n)
			}
			assert.Equal(t, tt.woken, woken)
			// The holds that left the queue left the index.
			left := 0
			for topic, set := range q.holds {
				left += len(set)
				assert.Contains(t, q.topics, topic)
			}
			assert.Equal(t, len(holds)-len(tt.woken), left)
			assert.Len(t, q.topics, len(q.holds))
			assert.IsIncreasing(t, q.topics)
		})
	}
}

// TestWakeHoldOnlyWhileQueued: wakeHold leaves alone a hold that has left
// the queue (its attempt owns it now).
func TestWakeHoldOnlyWhileQueued(t *testing.T) {
	q := newScheduler(nil)
	p := &store.Pending{ID: "p-1", Kind: store.KindHold, NextAt: time.Now().Add(time.Hour), Message: store.Message{Topic: "agent:a"}}
	e := q.add(p)
	q.wakeHold(e)
	q.mu.Lock()
	due, _ := q.next(time.Now())
	q.mu.Unlock()
	require.Same(t, p, due)
	p.NextAt = time.Now().Add(time.Hour)
	q.wakeHold(e)
	assert.True(t, p.NextAt.After(time.Now()))
	assert.Empty(t, q.holds)
	assert.Empty(t, q.topics)
}

// TestAddWakesRunOnlyForNewFirstWork: add wakes the run loop when the
// work it adds is due before all the rest, and only then, since run's
// timer is set for the first work.
func TestAddWakesRunOnlyForNewFirstWork(t *testing.T) {
	q := newScheduler(nil)
	now := time.Now()
	woke := func() bool {
		select {
		case <-q.wake:
			return true
		default:
			return false
		}
	}
	for _, tt := range []struct {
		id   string
		due  time.Duration
		woke bool
	}{
		{"p-000000000001", time.Hour, true},      // the only work
		{"p-000000000002", 2 * time.Hour, false}, // after the first
		{"p-000000000003", time.Hour, false},     // a tie goes by id
		{"p-000000000004", time.Minute, true},    // the new first
		{"p-000000000000", time.Minute, true},    // a tie it wins by id
		{"p-000000000005", 3 * time.Hour, false}, // last
	} {
		q.add(&store.Pending{ID: tt.id, Kind: store.KindRetry, NextAt: now.Add(tt.due)})
		assert.Equal(t, tt.woke, woke(), "added %s", tt.id)
	}
}

// BenchmarkWakeHolds measures the subscribe-time wake with 10,000 held
// messages on 1,000 topics: an exact subscription (the agent that
// appears) and a prefix one that matches a tenth of the topics.
func BenchmarkWakeHolds(b *testing.B) {
	for _, sub := range []string{"agent:%d", "team%d:"} {
		b.Run(sub, func(b *testing.B) {
			q := newScheduler(nil)
			later := time.Now().Add(time.Hour)
			for i := range 10000 {
				topic := fmt.Sprintf("agent:%d", i%1000)
				if i%10 == 0 {
					topic = fmt.Sprintf("team%d:%d", i%100/10, i)
				}
				q.add(&store.Pending{ID: fmt.Sprintf("p-%012d", i+1), Kind: store.KindHold, NextAt: later, Message: store.Message{Topic: topic}})
			}
			patterns := make([]*protocol.Pattern, 1000)
			for i := range patterns {
				p, err := protocol.ParsePattern(fmt.Sprintf(sub, i%10))
				require.NoError(b, err)
				patterns[i] = p
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				q.wakeHolds(patterns[i%len(patterns)], "someone")
				i++
			}
		})
	}
}
