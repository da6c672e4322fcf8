package bus

import (
	"context"
	"net/http"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// Middleware of publishes and deliveries, for an add-on that must be on
// a message's path, not beside it as an observer is: traces (bus/otel),
// whose spans wrap a publish's walk and each delivery attempt and whose
// trace context goes with the message. Watermill's handler middleware is
// the model: one handler shape, wrapped. With none registered, the core
// runs as if this file did not exist: no allocation, and the read
// loops' fast paths (direct.go, walk.go) stay open; with some, every
// publish and delivery goes the way the middleware sees.

// A Delivery is one attempt to deliver a message to one subscriber, as
// delivery middleware and a subscriber added with Subscribe see it.
type Delivery struct {
	// Message is read-only: a middleware that delivers the message
	// otherwise (its meta: a trace context) sets a copy here, which the
	// core encodes for this subscriber alone.
	Message      *store.Message
	ClientID     string
	Subscription string
	Attempt      int // from 1

	d *delivery
	// written, for a subscriber added with Subscribe, lets the
	// publisher's next message go (Written).
	written func()
}

// AppendParams appends the processMessage params of the delivery, as a
// peer would get them, to b.
func (d *Delivery) AppendParams(b []byte) []byte { return d.d.AppendParams(b) }

// Written says, for a subscriber added with Subscribe, that the delivery
// is on its way (its request written): the publisher's next message may
// now go out to this subscriber, as it may to a peer once the call is
// written. Once its DeliverFunc returns it is said for it; calling it
// again does nothing.
func (d *Delivery) Written() {
	if d.written != nil {
		d.written()
	}
}

// A DeliverFunc makes one delivery attempt within ctx and returns the
// subscriber's answer, as a peer's processMessage result is, or the
// error that stood for one (DeliveryOutcome names it). For a subscriber
// added with Subscribe, ctx ends after Options.DeliveryTimeout, and an
// error is an attempt that got no answer, retried as a peer's is: one
// that is context.DeadlineExceeded (errors.Is) counts as a timeout, any
// other as a subscriber that could not be reached.
type DeliverFunc func(ctx context.Context, d *Delivery) (protocol.ProcessMessageResult, error)

// A DeliveryMiddleware wraps every delivery attempt, local or to a
// subscriber on another node, outside the core's own measures.
type DeliveryMiddleware func(next DeliverFunc) DeliverFunc

// UseDelivery adds mw around the delivery attempts; the first added is
// outermost. UseDelivery may be called only from Extend.
func (s *Server) UseDelivery(mw DeliveryMiddleware) {
	s.mustExtend("UseDelivery")
	s.pipe.middleware = append(s.pipe.middleware, mw)
}

// DeliveryOutcome names an attempt's outcome as the metrics and the
// journal do: processed, rejected, not_processed, or the failure
// (timeout, disconnected, ...).
func DeliveryOutcome(r protocol.ProcessMessageResult, err error) string {
	return deliveryOutcome(r, err)
}

// A PublishHook hears that the core publishes m, named and routed to
// subscribers, before any delivery of it: it may replace m.Meta (the
// message is the core's until then), and returns what runs once the
// publish is done, its walk included when its door waits for one (nil
// for nothing). header is the HTTP request's m came by
// (PublishOptions.Header), nil for another door. It runs on the
// publisher's path: it must not block.
type PublishHook func(m *store.Message, header http.Header, subscribers int) (done func())

// OnPublish adds h to the publish hooks, run in the order added.
// OnPublish may be called only from Extend.
func (s *Server) OnPublish(h PublishHook) {
	s.mustExtend("OnPublish")
	s.publishHooks = append(s.publishHooks, h)
}

// hookPublish runs hooks for m and returns what ends them.
func hookPublish(hooks []PublishHook, m *store.Message, header http.Header, subscribers int) (done func()) {
	if len(hooks) == 1 {
		// The usual case, without the list.
		if done = hooks[0](m, header, subscribers); done != nil {
			return done
		}
		return func() {}
	}
	var dones []func()
	for _, h := range hooks {
		if f := h(m, header, subscribers); f != nil {
			dones = append(dones, f)
		}
	}
	return func() {
		for i := len(dones) - 1; i >= 0; i-- {
			dones[i]()
		}
	}
}

// useMiddleware wraps deliver in the middleware, the first added
// outermost; with none it leaves it as it is.
func (p *pipeline) useMiddleware() {
	mws, next := p.middleware, p.deliver
	if len(mws) == 0 {
		return
	}
	inner := DeliverFunc(func(ctx context.Context, dv *Delivery) (protocol.ProcessMessageResult, error) {
		d := dv.d
		if dv.Message != d.Message {
			// Its own message: the walk's shared encoding is not its.
			own := *d
			own.Message, own.shared = dv.Message, nil
			d = &own
		}
		return next(ctx, d)
	})
	for i := len(mws) - 1; i >= 0; i-- {
		inner = mws[i](inner)
	}
	p.deliver = func(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
		return inner(ctx, &Delivery{Message: d.Message, ClientID: d.ClientID, Subscription: d.Subscription, Attempt: d.Attempt, d: d})
	}
}
