package bus_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/bus/otel"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// BenchmarkRelay measures one publisher → bus → subscriber → ack →
// publisher round trip over loopback WebSockets, one message in flight,
// with the message journal on, as bub serve runs by default.
func BenchmarkRelay(b *testing.B) {
	srv := bustest.Start(b, &bus.Options{Extensions: []bus.Extension{journal.New(nil)}})
	bustest.Connect(b, srv.URL, "sub", bustest.Processed).Subscribe("bench", "")
	relay(b, bustest.Connect(b, srv.URL, "pub", nil))
}

// BenchmarkRelayScheduledRetry is BenchmarkRelay where the subscriber asks
// for a retry every time, so each publish also commits a retry to a
// durable store (fsync included) before the ack returns: the cost of a
// scheduled retry next to a plain delivery.
func BenchmarkRelayScheduledRetry(b *testing.B) {
	st, err := store.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	srv := bustest.Start(b, &bus.Options{Store: st, RetryBaseDelay: time.Hour, RetryDelayCap: time.Hour})
	bustest.Connect(b, srv.URL, "sub", func(protocol.ProcessMessageParams) any {
		return protocol.ProcessMessageResult{ShouldRetry: true}
	}).Subscribe("bench", "")
	relay(b, bustest.Connect(b, srv.URL, "pub", nil))
}

func relay(b *testing.B, pub *bustest.Client) {
	params := map[string]any{"topic": "bench", "payload": map[string]any{"type": "bench", "text": "hello"}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if r := pub.Call(protocol.MethodSendMessage, params); r.Error != nil {
			b.Fatal(r.Error)
		}
	}
}

// BenchmarkManyGlobs subscribes n patterns shaped as the router's worst
// case (`*?*?*?*?*?*?Z<id>*`: no literal head, many wildcards) and
// then relays on an unrelated topic. subscribe-ms is the wall time of the
// n subscribe calls, made one after another over one connection; the
// ns/op is the relay. The pattern limits are lifted so the router itself
// is measured.
func BenchmarkManyGlobs(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			srv := bustest.Start(b, &bus.Options{Limits: bus.Limits{MaxSubscriptions: -1, MaxPatternWildcards: -1}})
			globs := bustest.Connect(b, srv.URL, "globs", bustest.Processed)
			start := time.Now()
			for i := range n {
				globs.Subscribe(fmt.Sprintf("*?*?*?*?*?*?Z%d*", i), "")
			}
			subscribe := time.Since(start)
			bustest.Connect(b, srv.URL, "sub", bustest.Processed).Subscribe("bench", "")
			relay(b, bustest.Connect(b, srv.URL, "pub", nil))
			b.ReportMetric(float64(subscribe.Milliseconds()), "subscribe-ms")
		})
	}
}

// BenchmarkHeldPayloadHeap measures what 100 held messages of 900 KB cost
// a bus that resumes them from its store: heap-MB is HeapInuse after a GC
// with the bus running, minus HeapInuse after a GC before it started.
// Run with -benchtime 1x; each iteration reopens the store and starts a
// new bus on it.
func BenchmarkHeldPayloadHeap(b *testing.B) {
	const held, size = 100, 900 << 10
	dir := b.TempDir()
	st, err := store.Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"type":"blob","data":"` + strings.Repeat("x", size) + `"}`)
	for i := range held {
		p := &store.Pending{Kind: store.KindHold, NextAt: time.Now().Add(time.Hour),
			Attempts: []store.Attempt{{At: time.Now(), Error: "no subscribers"}},
			Message:  store.Message{ID: fmt.Sprint("m-", i), Topic: fmt.Sprint("agent:absent-", i), From: "pub", Payload: payload}}
		if err := st.PutPending(p); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	payload = nil
	var heapMB float64
	for b.Loop() {
		before := heapInuse()
		st, err := store.Open(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		srv, err := bus.New(&bus.Options{Store: st, HoldPatterns: []string{"agent:*"}})
		if err != nil {
			b.Fatal(err)
		}
		heapMB = float64(heapInuse()-before) / (1 << 20)
		if err := srv.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(heapMB, "heap-MB")
}

// heapInuse returns HeapInuse after a collection.
func heapInuse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// BenchmarkSubscribeChurn measures a subscribe and an unsubscribe, one
// after the other over one connection, while an observer of system:*
// answers every lifecycle event, and in "stalled" another observer never
// answers: the cost of a subscription's bookkeeping and of its two events.
// Every event reaches the answering observer before the bus stops.
func BenchmarkSubscribeChurn(b *testing.B) {
	for _, stalled := range []bool{false, true} {
		b.Run(map[bool]string{false: "observer", true: "stalled"}[stalled], func(b *testing.B) {
			srv := bustest.Start(b, &bus.Options{DeliveryTimeout: time.Hour})
			if stalled {
				gate := make(chan struct{})
				b.Cleanup(func() { close(gate) })
				bustest.Connect(b, srv.URL, "stalled", func(protocol.ProcessMessageParams) any {
					<-gate
					return protocol.ProcessMessageResult{}
				}).Subscribe("system:*", protocol.PolicyContinueAll)
			}
			bustest.Connect(b, srv.URL, "observer", bustest.Processed).Subscribe("system:client.*", protocol.PolicyContinueAll)
			actor := bustest.Connect(b, srv.URL, "actor", nil)
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				topic := fmt.Sprintf("churn:%d", i)
				i++
				actor.Subscribe(topic, "")
				actor.MustCall(protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: topic}, nil)
			}
		})
	}
}

// BenchmarkFanOut publishes to 100 subscribers of one topic, one message
// in flight, each subscriber answering at once. Under continueAll the
// deliveries go out together; under stopPropagationOnProcessed, with
// every subscriber answering not processed, one after another.
func BenchmarkFanOut(b *testing.B) {
	const subscribers = 100
	for _, policy := range []protocol.Policy{protocol.PolicyContinueAll, protocol.PolicyStopOnProcessed} {
		b.Run(string(policy), func(b *testing.B) {
			srv := bustest.Start(b, &bus.Options{Limits: bus.Limits{MaxSubscriptions: -1, MaxPatternWildcards: -1}})
			for i := range subscribers {
				bustest.Connect(b, srv.URL, fmt.Sprint("sub-", i), func(protocol.ProcessMessageParams) any {
					return protocol.ProcessMessageResult{}
				}).Subscribe("bench"+strings.Repeat("?", i)+"*", policy)
			}
			pub := bustest.Connect(b, srv.URL, "pub", nil)
			params := map[string]any{"topic": "bench" + strings.Repeat("x", subscribers), "payload": map[string]any{"type": "bench", "text": strings.Repeat("x", 1024)}}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if r := pub.Call(protocol.MethodSendMessage, params); r.Error != nil {
					b.Fatal(r.Error)
				}
			}
		})
	}
}

// BenchmarkRelayTraced is BenchmarkRelay with tracing on, every span
// sampled and none exported: what the spans and the per-delivery meta
// cost. BenchmarkRelay is the same path with tracing off.
func BenchmarkRelayTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	srv := bustest.Start(b, &bus.Options{Extensions: []bus.Extension{otel.New(&otel.Options{TracerProvider: tp})}})
	bustest.Connect(b, srv.URL, "sub", bustest.Processed).Subscribe("bench", "")
	relay(b, bustest.Connect(b, srv.URL, "pub", nil))
}
