package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// Traces (docs/OPERATIONS.md, "Traces"): with Options.TracerProvider
// set, each publish is a span, a child of the W3C trace context the
// publisher sent (meta.traceparent, or the traceparent header of an
// HTTP publish), and each delivery attempt a span, a child of the
// publish's. The message's meta.traceparent is the publish span's from
// then on, stored with it, so a retry after a restart is still a child
// of its publish; each processMessage carries the delivery span's, so
// that a subscriber's own spans are its children. Off (nil provider), the
// bus neither reads nor writes meta.traceparent and allocates nothing for
// traces: the hooks are a nil check.

// metaTraceparent and metaTracestate are the meta fields that carry the
// W3C trace context, named as the W3C headers are.
const (
	metaTraceparent = "traceparent"
	metaTracestate  = "tracestate"
)

// tracerName names the bus's tracer (its instrumentation scope).
const tracerName = "github.com/bub-bus/bub/bus"

// traceContext is the W3C trace context propagation the bus applies.
var traceContext propagation.TraceContext

// newTracer returns the bus's tracer, nil when tracing is off.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

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

// tracePublish starts m's publish span, a child of the trace context m's
// meta carries, and makes it m's: meta.traceparent names it from now
// on. subscribers is how many the message was routed to.
func (s *Server) tracePublish(m *store.Message, subscribers int) trace.Span {
	parent := traceContext.Extract(context.Background(), carrierOf(m.Meta))
	ctx, span := s.tracer.Start(parent, "publish "+m.Topic,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "bub"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", m.Topic),
			attribute.String("messaging.message.id", m.ID),
			attribute.String("messaging.client.id", m.From),
			attribute.Int("bub.subscribers", subscribers),
		))
	m.Meta = withTraceContext(ctx, m.Meta)
	return span
}

// traceHTTP makes an HTTP publish's traceparent header, with its
// tracestate, the trace context of the message it publishes, in place
// of any its meta carries: the header is the caller's current span.
func (s *Server) traceHTTP(m *store.Message, header http.Header) {
	if s.tracer == nil || header.Get(metaTraceparent) == "" {
		return
	}
	ctx := traceContext.Extract(context.Background(), propagation.HeaderCarrier(header))
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	m.Meta = withTraceContext(ctx, m.Meta)
}

// traceDeliveries wraps next with a span per delivery attempt, a child
// of the message's publish span, whose trace context the subscriber gets
// in meta; off, it is next.
func (s *Server) traceDeliveries(next deliverFunc) deliverFunc {
	if s.tracer == nil {
		return next
	}
	return func(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
		parent := traceContext.Extract(ctx, carrierOf(d.Message.Meta))
		ctx, span := s.tracer.Start(parent, "deliver "+d.Message.Topic,
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				attribute.String("messaging.system", "bub"),
				attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.destination.name", d.Message.Topic),
				attribute.String("messaging.destination.subscription.name", d.Subscription),
				attribute.String("messaging.message.id", d.Message.ID),
				attribute.String("bub.subscriber", d.ClientID),
				attribute.Int("bub.attempt", d.Attempt),
			))
		defer span.End()
		// The subscriber gets the delivery span's context: its own copy
		// of the message, encoded for it alone.
		m := *d.Message
		m.Meta = withTraceContext(ctx, m.Meta)
		traced := *d
		traced.Message, traced.shared = &m, nil
		r, err := next(ctx, &traced)
		outcome := deliveryOutcome(r, err)
		span.SetAttributes(attribute.String("bub.outcome", outcome))
		if err != nil {
			span.SetStatus(codes.Error, outcome)
		}
		return r, err
	}
}
