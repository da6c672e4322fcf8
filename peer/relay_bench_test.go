package peer_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bub-bus/bub/peer"
)

// BenchmarkRelay measures a Go-SDK-to-Go-SDK relay: a publisher and a
// subscriber, both peer.Conn, over a real bus on loopback, all in this
// process (so allocs/op counts the bus's share too). One op is one
// SendMessage answered with the subscriber's ack; "serial" keeps one
// message in flight, "depth64" 64 (32 goroutines per GOMAXPROCS on the
// 2-core box it was written on).
func BenchmarkRelay(b *testing.B) {
	payload := json.RawMessage(`{"type":"plaintext_message","text":"` + strings.Repeat("x", 1000) + `"}`)
	setup := func(b *testing.B) *peer.Conn {
		bus := startBus(b, nil)
		// Room for every message in flight: at exactly 64, a handler
		// that has answered but not yet let go of its slot turns the
		// next delivery away as busy, and the bus retries it.
		sub := dial(b, bus.URL, "sub", &peer.Options{MaxConcurrentHandlers: 256})
		if err := sub.Subscribe(context.Background(), "bench", func(context.Context, *peer.Delivery) (peer.Result, error) {
			return peer.Result{Processed: true}, nil
		}, nil); err != nil {
			b.Fatal(err)
		}
		return dial(b, bus.URL, "pub", nil)
	}
	send := func(b *testing.B, pub *peer.Conn) {
		r, err := pub.SendMessage(context.Background(), "bench", payload, nil)
		if err != nil {
			b.Error(err)
		} else if !r.Success || len(r.Acks) != 1 || !r.Acks[0].Processed {
			b.Errorf("not delivered: %+v", r)
		}
	}
	b.Run("serial", func(b *testing.B) {
		pub := setup(b)
		b.ReportAllocs()
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			send(b, pub)
		}
	})
	b.Run("depth64", func(b *testing.B) {
		pub := setup(b)
		b.ReportAllocs()
		b.SetParallelism(32)
		b.SetBytes(int64(len(payload)))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				send(b, pub)
			}
		})
	})
}
