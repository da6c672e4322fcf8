package otel

import (
	"context"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// tracerName names the bus's tracer (its instrumentation scope): the
// core's package, as before traces were an add-on, so that queries
// written for it still match.
const tracerName = "github.com/bub-bus/bub/bus"

// traceContext is the W3C trace context propagation the bus applies.
var traceContext propagation.TraceContext

// Options configure traces.
type Options struct {
	// TracerProvider makes the spans (required): cmd/bub's exports them
	// over OTLP (--otlp-endpoint).
	TracerProvider trace.TracerProvider
}

// New returns the extension that traces publishes and deliveries with
// opts.
func New(opts *Options) bus.Extension {
	return &extension{provider: opts.TracerProvider}
}

// extension is the add-on as the bus sees it. The nodes of a cluster in
// one process (tests) share one: it keeps nothing of a server.
type extension struct {
	provider trace.TracerProvider
}

// Extend puts the publish hook and the delivery middleware on the bus's
// path.
func (e *extension) Extend(s *bus.Server) error {
	if e.provider == nil {
		return errors.New("traces: no tracer provider")
	}
	t := &tracer{tracer: e.provider.Tracer(tracerName)}
	s.OnPublish(t.publish)
	s.UseDelivery(t.deliveries)
	return nil
}

// tracer makes a server's spans.
type tracer struct {
	tracer trace.Tracer
}

// publish starts m's publish span, a child of the trace context of
// header's traceparent when it has a valid one (the HTTP caller's
// current span), else of m's meta, and makes it m's: meta.traceparent
// names it from now on. subscribers is how many the message was routed
// to.
func (t *tracer) publish(m *store.Message, header http.Header, subscribers int) (done func()) {
	var parent context.Context
	if header.Get(metaTraceparent) != "" {
		ctx := traceContext.Extract(context.Background(), propagation.HeaderCarrier(header))
		if trace.SpanContextFromContext(ctx).IsValid() {
			parent = ctx
		}
	}
	if parent == nil {
		parent = traceContext.Extract(context.Background(), carrierOf(m.Meta))
	}
	ctx, span := t.tracer.Start(parent, "publish "+m.Topic,
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
	return func() { span.End() }
}

// deliveries wraps next with a span per delivery attempt, a child of
// the message's publish span, whose trace context the subscriber gets
// in meta.
func (t *tracer) deliveries(next bus.DeliverFunc) bus.DeliverFunc {
	return func(ctx context.Context, d *bus.Delivery) (protocol.ProcessMessageResult, error) {
		parent := traceContext.Extract(ctx, carrierOf(d.Message.Meta))
		ctx, span := t.tracer.Start(parent, "deliver "+d.Message.Topic,
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
		traced.Message = &m
		r, err := next(ctx, &traced)
		outcome := bus.DeliveryOutcome(r, err)
		span.SetAttributes(attribute.String("bub.outcome", outcome))
		if err != nil {
			span.SetStatus(codes.Error, outcome)
		}
		return r, err
	}
}
