package store_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// benchStores are the stores the benchmarks compare: the file store as the
// bus runs it, with fsync at every commit; the same without fsync, to show
// what the fsync costs; and the memory store.
var benchStores = []struct {
	name string
	open func(b *testing.B) *store.Store
}{
	{"file", func(b *testing.B) *store.Store { return openBench(b, nil) }},
	{"file-nosync", func(b *testing.B) *store.Store { return openBench(b, &store.Options{NoSync: true}) }},
	{"memory", func(b *testing.B) *store.Store { return store.OpenMemory() }},
}

func openBench(b *testing.B, opts *store.Options) *store.Store {
	s, err := store.Open(b.TempDir(), opts)
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// forEachBenchStore runs bench as a sub-benchmark on each of benchStores.
func forEachBenchStore(b *testing.B, bench func(b *testing.B, s *store.Store)) {
	for _, bs := range benchStores {
		b.Run(bs.name, func(b *testing.B) { bench(b, bs.open(b)) })
	}
}

// BenchmarkPutPending measures scheduling a retry: one durable commit.
func BenchmarkPutPending(b *testing.B) {
	forEachBenchStore(b, func(b *testing.B, s *store.Store) {
		i := 0
		for b.Loop() {
			require.NoError(b, s.PutPending(retry(i, at(i))))
			i++
		}
	})
}

// BenchmarkDeadLetter measures dead-lettering a pending retry: the pending
// entry leaves and the dead letter arrives in one durable commit.
func BenchmarkDeadLetter(b *testing.B) {
	forEachBenchStore(b, func(b *testing.B, s *store.Store) {
		i := 0
		for b.Loop() {
			b.StopTimer()
			p := retry(i, at(i))
			require.NoError(b, s.PutPending(p))
			b.StartTimer()
			_, err := s.DeadLetter(p.ID, deadLetter(i, "agent:alice", protocol.ReasonMaxRetries, at(i)))
			require.NoError(b, err)
			i++
		}
	})
}

// benchPayload is a 1 KiB payload, the size of bench/'s stored-retries
// scenario.
var benchPayload = json.RawMessage(`{"type":"bench","data":"` + strings.Repeat("x", 1024-27) + `"}`)

// BenchmarkPutPendingConcurrent measures stored retries per second with n
// goroutines putting at once, as the bus's connections and its scheduler
// do: each PutPending returns only once its record is committed, so the
// rate is bounded by how many records share one fsync. The 1 KiB case is
// bench/'s stored-retries scenario without the network: the store's share
// of its CPU per retry.
func BenchmarkPutPendingConcurrent(b *testing.B) {
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprint("putters=", n), func(b *testing.B) {
			forEachBenchStore(b, func(b *testing.B, s *store.Store) {
				putConcurrently(b, s, n, func(p *store.Pending) {})
			})
		})
	}
	b.Run("putters=64/payload=1KiB", func(b *testing.B) {
		forEachBenchStore(b, func(b *testing.B, s *store.Store) {
			putConcurrently(b, s, 64, func(p *store.Pending) { p.Message.Payload = benchPayload })
		})
	})
}

// putConcurrently puts b.N retries, changed by edit, from n goroutines.
func putConcurrently(b *testing.B, s *store.Store, n int, edit func(*store.Pending)) {
	var next, commits atomic.Int64
	store.SetOnCommit(s, func(time.Duration) { commits.Add(1) })
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for range n {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= b.N; i = int(next.Add(1)) {
				p := retry(i, at(i))
				edit(p)
				if err := s.PutPending(p); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// CPU, not time, is what a busy machine does not distort.
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "retries/s")
	b.ReportMetric(float64(b.N)/float64(commits.Load()), "writes/commit")
}
