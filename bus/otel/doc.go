// Package otel traces the bus with OpenTelemetry (docs/OPERATIONS.md,
// "Traces"), as an add-on: each publish is a span, a child of the W3C
// trace context the publisher sent (meta.traceparent, or the
// traceparent header of an HTTP publish), and each delivery attempt a
// span, a child of the publish's. The message's meta.traceparent is the
// publish span's from then on, stored with it, so a retry after a
// restart is still a child of its publish; each processMessage carries
// the delivery span's, so that a subscriber's own spans are its
// children.
//
// It uses the core's middleware seams (bus.Server.OnPublish and
// UseDelivery). A bus without it neither reads nor writes
// meta.traceparent and allocates nothing for traces.
package otel
