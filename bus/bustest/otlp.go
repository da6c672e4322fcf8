package bustest

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// OTLP is an OTLP/HTTP trace receiver on loopback: it decodes each
// export (protobuf, gzipped or not) and keeps its spans.
type OTLP struct {
	// URL is the receiver's base URL; exports go to URL + "/v1/traces".
	URL string

	mu        sync.Mutex
	spans     []*tracepb.Span
	resources []map[string]string
	changed   chan struct{}
}

// StartOTLP starts a receiver, stopped when the test ends.
func StartOTLP(t testing.TB) *OTLP {
	t.Helper()
	o := &OTLP{changed: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(srv.Close)
	o.URL = srv.URL
	return o
}

func (o *OTLP) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = z
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, "decode export: "+err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		attrs := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			attrs[kv.Key] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				o.spans = append(o.spans, sp)
				o.resources = append(o.resources, attrs)
			}
		}
	}
	close(o.changed)
	o.changed = make(chan struct{})
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Wait returns the spans received once ok says they are all there, and
// their resources' string attributes, span by span; it fails the test
// after LongTimeout.
func (o *OTLP) Wait(t testing.TB, ok func([]*tracepb.Span) bool) ([]*tracepb.Span, []map[string]string) {
	t.Helper()
	timeout := time.After(LongTimeout)
	for {
		o.mu.Lock()
		spans, resources, changed := append([]*tracepb.Span(nil), o.spans...), append([]map[string]string(nil), o.resources...), o.changed
		o.mu.Unlock()
		if ok(spans) {
			return spans, resources
		}
		select {
		case <-changed:
		case <-timeout:
			names := make([]string, len(spans))
			for i, s := range spans {
				names[i] = s.Name
			}
			t.Fatalf("bustest: OTLP: received %d spans %v; not yet what the test waits for", len(spans), names)
		}
	}
}
