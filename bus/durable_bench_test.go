package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
)

// BenchmarkDurableAwayMemory measures what the bus holds in memory per
// durable subscription of an away owner (a hibernated agent): 10,000
// owners, one subscription each, read back from the store on start, as
// after a restart, less what a bus with none holds. Target: under
// 1 KiB (issue 23).
func BenchmarkDurableAwayMemory(b *testing.B) {
	const owners = 10000
	dir := b.TempDir()
	st, err := store.Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := range owners {
		id := fmt.Sprintf("agent-%06d", i)
		o := &store.DurableOwner{ClientID: id, Identity: "agents", Waker: "spawner", Subscriptions: []store.DurableSubscription{
			{Pattern: "agent:" + id, Policy: "stopPropagationOnProcessed", Created: time.Now()},
		}}
		if err := st.PutDurable(o); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	empty := b.TempDir()
	start := func(dir string) int64 {
		st, err := store.Open(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		before := heapInuse()
		srv, err := bus.New(&bus.Options{Store: st})
		if err != nil {
			b.Fatal(err)
		}
		used := heapInuse() - before
		if err := srv.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		return used
	}
	var perSub float64
	for b.Loop() {
		base := start(empty)
		perSub = float64(start(dir)-base) / owners
	}
	b.ReportMetric(perSub, "bytes/subscription")
}
