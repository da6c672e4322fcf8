package otel

import (
	"bytes"
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/propagation"
)

// metaTraceparent and metaTracestate are the meta fields that carry the
// W3C trace context, named as the W3C headers are.
const (
	metaTraceparent = "traceparent"
	metaTracestate  = "tracestate"
)

// metaCarrier is the trace context of a message's meta: its traceparent
// and tracestate fields.
type metaCarrier struct {
	traceparent, tracestate string
}

var _ propagation.TextMapCarrier = (*metaCarrier)(nil)

func (c *metaCarrier) Get(key string) string {
	switch key {
	case metaTraceparent:
		return c.traceparent
	case metaTracestate:
		return c.tracestate
	}
	return ""
}

func (c *metaCarrier) Set(key, value string) {
	switch key {
	case metaTraceparent:
		c.traceparent = value
	case metaTracestate:
		c.tracestate = value
	}
}

func (c *metaCarrier) Keys() []string { return []string{metaTraceparent, metaTracestate} }

// carrierOf reads meta's trace context; a meta that is no object, or
// whose fields are no strings, carries none.
func carrierOf(meta json.RawMessage) *metaCarrier {
	c := new(metaCarrier)
	if !bytes.Contains(meta, []byte(metaTraceparent)) {
		return c
	}
	// A map, not a struct: a struct's fields would match "TraceParent"
	// too, which withTraceContext keeps as another field.
	var fields map[string]json.RawMessage
	if json.Unmarshal(meta, &fields) == nil {
		_ = json.Unmarshal(fields[metaTraceparent], &c.traceparent)
		_ = json.Unmarshal(fields[metaTracestate], &c.tracestate)
	}
	return c
}

// withTraceContext returns meta with ctx's span as its trace context:
// traceparent, and tracestate when ctx has one, replacing any there
// were. Meta that is no object (it was checked to be one, or null) is
// returned as it is.
func withTraceContext(ctx context.Context, meta json.RawMessage) json.RawMessage {
	c := new(metaCarrier)
	traceContext.Inject(ctx, c)
	fields := map[string]json.RawMessage{}
	if len(meta) > 0 && string(meta) != "null" {
		if err := json.Unmarshal(meta, &fields); err != nil {
			return meta
		}
	}
	delete(fields, metaTracestate)
	for k, v := range map[string]string{metaTraceparent: c.traceparent, metaTracestate: c.tracestate} {
		if v != "" {
			fields[k], _ = json.Marshal(v)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return meta
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
