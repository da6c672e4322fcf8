package main

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// TestServeTraces runs bub serve with BUB_OTLP_ENDPOINT set to a
// receiver on loopback and the OTEL_* variables, publishes over HTTP with
// a traceparent header, stops the bus, and checks the spans it exported
// (the last batch at exit): the publish span is a child of the header's
// span, the delivery span a child of the publish span, the subscriber
// got the delivery span's traceparent, and the resource says what the
// variables said.
func TestServeTraces(t *testing.T) {
	otlp := bustest.StartOTLP(t)
	t.Setenv("BUB_OTLP_ENDPOINT", otlp.URL)
	t.Setenv("OTEL_SERVICE_NAME", "bub-test")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	d := startBus(t, t.TempDir(), "--log-level", "warn")
	got := make(chan protocol.ProcessMessageParams, 1)
	bustest.Connect(t, d.url, "worker", func(p protocol.ProcessMessageParams) any {
		got <- p
		return protocol.ProcessMessageResult{Processed: true}
	}).Subscribe("jobs:a", "")

	const trace, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	status, _, answer := bustest.Post(t, d.http+"/v1/messages?wait=ack", `{"topic":"jobs:a","payload":{"type":"t"}}`,
		map[string]string{"traceparent": "00-" + trace + "-" + parent + "-01"})
	if status != 201 {
		t.Fatalf("POST: %d %s", status, answer)
	}
	delivered := <-got
	d.stop(t)

	spans, resources := otlp.Wait(t, func(s []*tracepb.Span) bool { return len(s) >= 2 })
	byName := map[string]int{}
	for i, s := range spans {
		byName[s.Name] = i
		if resources[i]["service.name"] != "bub-test" || resources[i]["deployment.environment.name"] != "test" {
			t.Errorf("span %s: resource %v; want OTEL_SERVICE_NAME's and OTEL_RESOURCE_ATTRIBUTES'", s.Name, resources[i])
		}
	}
	pi, ok1 := byName["publish jobs:a"]
	di, ok2 := byName["deliver jobs:a"]
	if !ok1 || !ok2 || len(spans) != 2 {
		t.Fatalf("spans %v; want publish jobs:a and deliver jobs:a", byName)
	}
	publish, deliver := spans[pi], spans[di]
	if hex.EncodeToString(publish.TraceId) != trace || hex.EncodeToString(publish.ParentSpanId) != parent {
		t.Errorf("publish span in trace %x, parent %x; want %s, %s (the traceparent header)", publish.TraceId, publish.ParentSpanId, trace, parent)
	}
	if string(deliver.TraceId) != string(publish.TraceId) || string(deliver.ParentSpanId) != string(publish.SpanId) {
		t.Errorf("delivery span in trace %x, parent %x; want a child of the publish span %x", deliver.TraceId, deliver.ParentSpanId, publish.SpanId)
	}
	var meta map[string]string
	if err := json.Unmarshal(delivered.Meta, &meta); err != nil {
		t.Fatalf("meta %s: %v", delivered.Meta, err)
	}
	if want := "00-" + trace + "-" + hex.EncodeToString(deliver.SpanId) + "-01"; meta["traceparent"] != want {
		t.Errorf("subscriber's meta.traceparent %q; want %q (the delivery span)", meta["traceparent"], want)
	}
}

// TestOTLPEndpoint checks what --otlp-endpoint takes: an http or https
// URL, to which the traces path is added when it has none.
func TestOTLPEndpoint(t *testing.T) {
	for _, tt := range []struct{ in, want, err string }{
		{"http://collector:4318", "http://collector:4318/v1/traces", ""},
		{"https://collector:4318/", "https://collector:4318/v1/traces", ""},
		{"http://collector:4318/custom/traces", "http://collector:4318/custom/traces", ""},
		{"collector:4318", "", "want an http:// or https:// URL"},
		{"grpc://collector:4317", "", "want an http:// or https:// URL"},
		{"http://", "", "want an http:// or https:// URL"},
		{"ftp://user:secret@collector:21", "", `"ftp://user:xxxxx@collector:21"`},
	} {
		u, err := parseOTLPEndpoint(tt.in)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%q: %v; want an error with %q, no secret", tt.in, err, tt.err)
			}
		case err != nil || u.String() != tt.want:
			t.Errorf("%q: %v %v; want %s", tt.in, u, err, tt.want)
		}
	}
}

// TestServeTracesSampledOut runs bub serve with OTEL_TRACES_SAMPLER
// always_off: it exports no span, yet still hands the subscriber the
// trace context, in the publisher's trace and marked not sampled.
func TestServeTracesSampledOut(t *testing.T) {
	otlp := bustest.StartOTLP(t)
	t.Setenv("BUB_OTLP_ENDPOINT", otlp.URL)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	d := startBus(t, t.TempDir(), "--log-level", "warn")
	_, got := bustest.Collect(t, d.url, "worker", "jobs:*")
	const trace = "0af7651916cd43dd8448eb211c80319c"
	status, _, answer := bustest.Post(t, d.http+"/v1/messages", `{"topic":"jobs:a","payload":{"type":"t"}}`,
		map[string]string{"traceparent": "00-" + trace + "-b7ad6b7169203331-01"})
	if status != 201 {
		t.Fatalf("POST: %d %s", status, answer)
	}
	delivered := <-got
	d.stop(t) // the spans batched are exported before the exit

	var meta map[string]string
	if err := json.Unmarshal(delivered.Meta, &meta); err != nil {
		t.Fatalf("meta %s: %v", delivered.Meta, err)
	}
	if tp := meta["traceparent"]; !strings.HasPrefix(tp, "00-"+trace+"-") || !strings.HasSuffix(tp, "-00") || strings.Contains(tp, "b7ad6b7169203331") {
		t.Errorf("subscriber's traceparent %q; want trace %s, a new span, not sampled", tp, trace)
	}
	if spans, _ := otlp.Wait(t, func([]*tracepb.Span) bool { return true }); len(spans) != 0 {
		t.Errorf("exported %d spans with always_off", len(spans))
	}
}
