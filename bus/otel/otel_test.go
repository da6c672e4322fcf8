package otel_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/otel"
	"github.com/bub-bus/bub/protocol"
)

// A W3C trace context as a publisher sends it.
const (
	traceID      = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpanID = "00f067aa0ba902b7"
	traceparent  = "00-" + traceID + "-" + parentSpanID + "-01"
)

// tracedBus starts a bus that exports its spans to a receiver on
// loopback over OTLP/HTTP, one export per span.
func tracedBus(t *testing.T, opts *bus.Options) (*bustest.Server, *bustest.OTLP) {
	t.Helper()
	otlp := bustest.StartOTLP(t)
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(otlp.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts.Extensions = append(opts.Extensions, otel.New(&otel.Options{TracerProvider: tp}))
	return bustest.Start(t, opts), otlp
}

// spansNamed returns the spans named name.
func spansNamed(spans []*tracepb.Span, name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// intAttribute returns span's integer attribute key.
func intAttribute(span *tracepb.Span, key string) int64 {
	for _, kv := range span.Attributes {
		if kv.Key == key {
			return kv.GetValue().GetIntValue()
		}
	}
	return -1
}

// metaOf decodes processMessage's meta.
func metaOf(t *testing.T, p protocol.ProcessMessageParams) map[string]string {
	t.Helper()
	var m map[string]string
	if err := json.Unmarshal(p.Meta, &m); err != nil {
		t.Fatalf("meta %s: %v", p.Meta, err)
	}
	return m
}

// TestTraces publishes with meta.traceparent to a subscriber that asks
// for a retry once, and checks the spans the bus exports: the publish
// span is a child of the publisher's span, each delivery attempt (the
// retry included) a child of the publish span, and each processMessage
// carries, in meta, the trace context of its delivery span, other meta
// fields kept.
func TestTraces(t *testing.T) {
	srv, otlp := tracedBus(t, &bus.Options{RetryBaseDelay: 10 * time.Millisecond, RetryDelayCap: 50 * time.Millisecond})
	got := make(chan protocol.ProcessMessageParams, 4)
	bustest.Connect(t, srv.URL, "worker", func(p protocol.ProcessMessageParams) any {
		got <- p
		return protocol.ProcessMessageResult{ShouldRetry: p.Attempt == 1, Processed: p.Attempt > 1}
	}).Subscribe("jobs:a", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	var r protocol.SendMessageResult
	pub.MustCall(protocol.MethodSendMessage, map[string]any{
		"topic": "jobs:a", "payload": map[string]any{"type": "t"},
		"meta": map[string]any{"traceparent": traceparent, "note": "kept"},
	}, &r)
	var deliveries []protocol.ProcessMessageParams
	for len(deliveries) < 2 {
		select {
		case p := <-got:
			deliveries = append(deliveries, p)
		case <-time.After(bustest.Timeout):
			t.Fatalf("delivered %d attempts; want 2", len(deliveries))
		}
	}

	spans, _ := otlp.Wait(t, func(s []*tracepb.Span) bool {
		return len(spansNamed(s, "publish jobs:a")) == 1 && len(spansNamed(s, "deliver jobs:a")) == 2
	})
	publish := spansNamed(spans, "publish jobs:a")[0]
	if hex.EncodeToString(publish.TraceId) != traceID || hex.EncodeToString(publish.ParentSpanId) != parentSpanID {
		t.Fatalf("publish span in trace %x with parent %x; want trace %s, parent %s (meta.traceparent)", publish.TraceId, publish.ParentSpanId, traceID, parentSpanID)
	}
	if publish.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("publish span kind %v; want producer", publish.Kind)
	}
	byAttempt := map[int64]*tracepb.Span{}
	for _, d := range spansNamed(spans, "deliver jobs:a") {
		if hex.EncodeToString(d.TraceId) != traceID || string(d.ParentSpanId) != string(publish.SpanId) {
			t.Errorf("delivery span (attempt %d) in trace %x with parent %x; want a child of the publish span %x", intAttribute(d, "bub.attempt"), d.TraceId, d.ParentSpanId, publish.SpanId)
		}
		byAttempt[intAttribute(d, "bub.attempt")] = d
	}
	for _, p := range deliveries {
		d := byAttempt[int64(p.Attempt)]
		if d == nil {
			t.Fatalf("no delivery span for attempt %d", p.Attempt)
		}
		meta := metaOf(t, p)
		want := "00-" + traceID + "-" + hex.EncodeToString(d.SpanId) + "-01"
		if meta["traceparent"] != want || meta["note"] != "kept" {
			t.Errorf("attempt %d: meta %v; want traceparent %s (its delivery span) and note kept", p.Attempt, meta, want)
		}
	}
}

// TestTracesHTTP checks that the traceparent header of POST /v1/messages
// is the publish span's parent, over a meta.traceparent in the body.
func TestTracesHTTP(t *testing.T) {
	srv, otlp := tracedBus(t, &bus.Options{})
	_, got := bustest.Collect(t, srv.URL, "worker", "jobs:*")
	const headerTrace, headerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	body := `{"topic":"jobs:h","payload":{"type":"t"},"meta":{"traceparent":"` + traceparent + `"}}`
	status, _, answer := bustest.Post(t, srv.HTTP.URL+"/v1/messages", body, map[string]string{"traceparent": "00-" + headerTrace + "-" + headerSpan + "-01"})
	if status != 201 {
		t.Fatalf("POST: %d %s", status, answer)
	}
	d := <-got
	spans, _ := otlp.Wait(t, func(s []*tracepb.Span) bool {
		return len(spansNamed(s, "publish jobs:h")) == 1 && len(spansNamed(s, "deliver jobs:h")) == 1
	})
	publish := spansNamed(spans, "publish jobs:h")[0]
	if hex.EncodeToString(publish.TraceId) != headerTrace || hex.EncodeToString(publish.ParentSpanId) != headerSpan {
		t.Fatalf("publish span in trace %x with parent %x; want trace %s, parent %s (the header)", publish.TraceId, publish.ParentSpanId, headerTrace, headerSpan)
	}
	var meta map[string]string
	_ = json.Unmarshal(d.Meta, &meta)
	deliver := spansNamed(spans, "deliver jobs:h")[0]
	if want := "00-" + headerTrace + "-" + hex.EncodeToString(deliver.SpanId) + "-01"; meta["traceparent"] != want {
		t.Fatalf("subscriber's traceparent %q; want %q", meta["traceparent"], want)
	}
}

// TestTracesOff checks that a bus without a tracer passes meta on as
// the publisher sent it, traceparent included.
func TestTracesOff(t *testing.T) {
	srv := bustest.Start(t, nil)
	_, got := bustest.Collect(t, srv.URL, "worker", "jobs:*")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	meta := `{"traceparent":"` + traceparent + `","z":1,"a":"x"}`
	pub.MustCall(protocol.MethodSendMessage, map[string]any{"topic": "jobs:a", "payload": map[string]any{"type": "t"}, "meta": json.RawMessage(meta)}, nil)
	if d := <-got; string(d.Meta) != meta {
		t.Fatalf("meta %s; want %s as sent", d.Meta, meta)
	}
}
