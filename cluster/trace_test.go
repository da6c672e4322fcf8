package cluster_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/otel"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/protocol"
)

// TestTracesAcrossNodes publishes on one node to a subscriber on the
// other: the publisher's node traces the delivery, a child of the
// publish span, and the subscriber, across the nodes, gets that
// delivery span's trace context in meta.
func TestTracesAcrossNodes(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	nodes := clustertest.Start(t, &bus.Options{Extensions: []bus.Extension{otel.New(&otel.Options{TracerProvider: tp})}}, "a", "b")
	_, got := bustest.Collect(t, nodes[1].URL, "worker", "jobs:*")
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	pub := bustest.Connect(t, nodes[0].URL, "pub", nil)
	pub.MustCall(protocol.MethodSendMessage, map[string]any{
		"topic": "jobs:a", "payload": map[string]any{"type": "t"},
		"meta": map[string]any{"traceparent": "00-" + traceID + "-" + parent + "-01"},
	}, nil)
	var d []byte
	select {
	case p := <-got:
		d = p.Meta
	case <-time.After(clustertest.Timeout):
		t.Fatal("not delivered on b")
	}
	// The sendMessage result came after the walk: both spans ended.
	var publish, deliver sdktrace.ReadOnlySpan
	for _, s := range spans.GetSpans().Snapshots() {
		switch s.Name() {
		case "publish jobs:a":
			publish = s
		case "deliver jobs:a":
			deliver = s
		}
	}
	if publish == nil || deliver == nil {
		t.Fatalf("spans %v; want a publish and a delivery", spans.GetSpans())
	}
	if publish.SpanContext().TraceID().String() != traceID || publish.Parent().SpanID().String() != parent {
		t.Errorf("publish span %v, parent %v; want trace %s, parent %s", publish.SpanContext(), publish.Parent(), traceID, parent)
	}
	if deliver.Parent().SpanID() != publish.SpanContext().SpanID() {
		t.Errorf("delivery span's parent %s; want the publish span %s", deliver.Parent().SpanID(), publish.SpanContext().SpanID())
	}
	var meta map[string]string
	if err := json.Unmarshal(d, &meta); err != nil {
		t.Fatalf("meta %s: %v", d, err)
	}
	if want := "00-" + traceID + "-" + deliver.SpanContext().SpanID().String() + "-01"; meta["traceparent"] != want {
		t.Errorf("the subscriber on b got traceparent %q; want %q (the delivery span)", meta["traceparent"], want)
	}
}
