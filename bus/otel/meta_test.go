package otel

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// spanContext is a span of a publisher, as a traceparent names it.
var spanContext = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	TraceFlags: trace.FlagsSampled,
})

const spanTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestTraceMeta checks how a message's meta gets and gives its trace
// context: the other fields are kept, a tracestate the new context lacks
// is dropped, and meta that is no object carries none and is not
// changed.
func TestTraceMeta(t *testing.T) {
	ctx := trace.ContextWithSpanContext(context.Background(), spanContext)
	for _, tt := range []struct{ meta, want, traceparent string }{
		{"", `{"traceparent":"` + spanTraceparent + `"}`, ""},
		{"null", `{"traceparent":"` + spanTraceparent + `"}`, ""},
		{`{"note":"<kept>","n":[1,2]}`, `{"n":[1,2],"note":"<kept>","traceparent":"` + spanTraceparent + `"}`, ""},
		{`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"a=b"}`, `{"traceparent":"` + spanTraceparent + `"}`, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{`{"traceparent":7}`, `{"traceparent":"` + spanTraceparent + `"}`, ""},
		{`{"TraceParent":"x"}`, `{"TraceParent":"x","traceparent":"` + spanTraceparent + `"}`, ""},
		{`[1]`, `[1]`, ""},
	} {
		if got := carrierOf(json.RawMessage(tt.meta)).traceparent; got != tt.traceparent {
			t.Errorf("carrierOf(%s): traceparent %q; want %q", tt.meta, got, tt.traceparent)
		}
		if got := withTraceContext(ctx, json.RawMessage(tt.meta)); string(got) != tt.want {
			t.Errorf("withTraceContext(%s) = %s; want %s", tt.meta, got, tt.want)
		}
	}
}

// FuzzTraceMeta feeds publishers' meta to the trace context's reader and
// writer: neither panics, and an object comes back an object that names
// the new context and keeps every other field.
func FuzzTraceMeta(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `{"traceparent":"` + spanTraceparent + `","x":{"y":[1]}}`, `{"traceparent":null}`, `{"tracestate":"a=b,c=d"}`, `"x"`} {
		f.Add(s)
	}
	ctx := trace.ContextWithSpanContext(context.Background(), spanContext)
	f.Fuzz(func(t *testing.T, meta string) {
		carrierOf(json.RawMessage(meta))
		var before map[string]json.RawMessage
		if json.Unmarshal([]byte(meta), &before) != nil || before == nil {
			return
		}
		out := withTraceContext(ctx, json.RawMessage(meta))
		var after map[string]json.RawMessage
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("withTraceContext(%s) = %s: %v", meta, out, err)
		}
		if got := carrierOf(out).traceparent; got != spanTraceparent {
			t.Fatalf("withTraceContext(%s) = %s: traceparent %q", meta, out, got)
		}
		for k := range before {
			if _, ok := after[k]; !ok && k != metaTracestate {
				t.Fatalf("withTraceContext(%s) = %s: field %q lost", meta, out, k)
			}
		}
	})
}
