package bus

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// nopObserver hears every event and keeps none.
type nopObserver struct{}

func (nopObserver) Observe(Event) {}

// TestJournalHooksOffAllocateNothing checks that with nobody observing
// (the journal off) the emitters on the relay's path allocate nothing.
func TestJournalHooksOffAllocateNothing(t *testing.T) {
	var obs observers
	m := &store.Message{ID: "m1", Topic: "jobs:a", Meta: []byte(`{"correlation_id":"x"}`)}
	d := &delivery{Message: m, ClientID: "w", Subscription: "jobs:*", Attempt: 1}
	chain := []*subscription{}
	allocs := testing.AllocsPerRun(100, func() {
		obs.emitAccepted(&conn{}, m, "")
		obs.emitRouted(protocol.JournalRouted, m, chain, "")
		obs.emitDelivery(d, "processed", nil)
	})
	require.Zero(t, allocs)
}

// TestObserveDeliveryAllocatesNothing checks that telling an observer of
// a delivery allocates nothing: the event goes by value (the journal's
// own cost is bus/journal's TestJournalRecordAllocatesOnlyBlocks).
func TestObserveDeliveryAllocatesNothing(t *testing.T) {
	obs := observers{nopObserver{}}
	d := &delivery{Message: &store.Message{ID: "m1", Topic: "jobs:a"}, ClientID: "w", Subscription: "jobs:*", Attempt: 1}
	require.Zero(t, testing.AllocsPerRun(100, func() { obs.emitDelivery(d, "processed", nil) }))
}

// BenchmarkObserve measures the core's side of telling what happened to
// one delivery: nobody observing, and one observer that keeps nothing.
// The journal's side is bus/journal's BenchmarkJournalRecord.
func BenchmarkObserve(b *testing.B) {
	d := &delivery{Message: &store.Message{ID: "0a1b2c3d4e5f-12345", Topic: "jobs:a"}, ClientID: "worker", Subscription: "jobs:*", Attempt: 1}
	for _, bc := range []struct {
		name string
		obs  observers
	}{{"off", nil}, {"on", observers{nopObserver{}}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.obs.emitDelivery(d, "processed", nil)
			}
		})
	}
}
