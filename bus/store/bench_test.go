package store_test

import (
	"testing"

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
