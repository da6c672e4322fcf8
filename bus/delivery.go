package bus

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// delivery is one attempt to hand a message to one subscriber. The
// subscriber is named by identity (clientId and pattern) so a later attempt
// can reach the same client on a new connection.
type delivery struct {
	Message      *store.Message
	ClientID     string
	Subscription string
	Attempt      int // from 1
	to           subscriber
	// shared is the params every delivery of the walk shares, nil for a
	// lone delivery (see sharedParams).
	shared *sharedParams
	// turn is the delivery's place in its publisher's order (order.go),
	// nil when it keeps none; call passes it once the request is written.
	turn *ticket
	// params, when set, are the processMessage params as another node
	// of the cluster encoded them (cluster.go), written as they are, and
	// written tells that node the frame is written, so it can hand this
	// subscriber its next request.
	params  []byte
	written func()
}

// deliverFunc makes one delivery and returns the subscriber's answer, or a
// *deliveryError when there was none.
type deliverFunc func(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error)

// localFunc makes one delivery to c, one of this node's connections.
type localFunc func(ctx context.Context, c *conn, d *delivery) (protocol.ProcessMessageResult, error)

// layer is one per-attempt concern of a delivery to one of this node's
// connections, in two halves around the call: enter before it, leave
// once it has its outcome. Halves rather than a wrapper, so that both
// ways of making the call run the same code: the pipeline, which waits
// for the answer (layered), and the call a walk writes itself (walk.go),
// whose answer comes on the subscriber's read loop or the walk's timer,
// and which runs enterLayers and leaveLayers itself. Retries and
// dead-lettering are decided per routing pass (propagate.go, retry.go),
// not per attempt, so they are not layers.
type layer struct {
	// enter runs before the call. An error refuses the attempt: the
	// call is not made, and the error is the attempt's outcome.
	enter func(c *conn, d *delivery) error
	// leave runs once for each attempt enter let through, with its
	// outcome: the call's answer or failure, a refusal by a layer inside
	// this one, or errPanicked when the bus panicked on the way.
	leave func(c *conn, d *delivery, err error)
}

// layerHook, when set (by tests only), is one more layer, the innermost:
// a failpoint for the delivery layers (export_test.go).
var layerHook *layer

// pipeline is the delivery pipeline: what every delivery attempt goes
// through, from the walk, a retry or a durable subscription to the
// subscriber's answer. It owns the per-attempt layers, the add-ons'
// delivery middleware and the two ways in built from them: deliver, the
// way of every delivery, measured; and deliverLocal, deliver's part for a
// connection of this node (conn.deliver), also the way of a delivery
// another node of the cluster asks this one to make. A walk that writes
// its calls itself (walk.go) runs the same parts one by one: enterLayers,
// then callResult, leaveLayers and measured once the answer is in.
type pipeline struct {
	deliver      deliverFunc
	deliverLocal localFunc
	// layers are the per-attempt layers, outermost first, run by
	// deliverLocal and by the relay on the read loops (walk.go).
	layers []layer
	// middleware is the add-ons' (middleware.go), put around deliver
	// once they have registered it (useMiddleware).
	middleware []DeliveryMiddleware

	// What it reads of the server: the bound of each attempt
	// (Options.DeliveryTimeout), the metrics it counts deliveries in, and
	// the observers it tells of them, the Server's own list, which the
	// add-ons fill in after the pipeline is built.
	deliveryTimeout time.Duration
	metrics         *metrics
	observers       *observers
}

// newPipeline builds the delivery pipeline around layers, outermost
// first: every delivery is measured and made by its subscriber; a local
// connection's goes through the layers, then the call, bounded by the
// timeout, and a stand-in's to its node (standIn.deliver), where that
// node's layers apply. The add-ons' delivery middleware goes around it
// once they are registered (useMiddleware).
func newPipeline(timeout time.Duration, m *metrics, obs *observers, layers ...layer) *pipeline {
	if layerHook != nil {
		layers = append(layers, *layerHook)
	}
	p := &pipeline{layers: layers, deliveryTimeout: timeout, metrics: m, observers: obs}
	p.deliverLocal = p.layered(p.timeout(p.call))
	p.deliver = p.measure(func(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
		return d.to.deliver(ctx, d)
	})
	return p
}

// layered runs next inside the layers: every layer whose enter half let
// the attempt through is left once, whatever ends it, a panic included
// (which goes on once they are left).
func (p *pipeline) layered(next localFunc) localFunc {
	return func(ctx context.Context, c *conn, d *delivery) (r protocol.ProcessMessageResult, err error) {
		if err := p.enterLayers(c, d); err != nil {
			return r, err
		}
		left := false
		defer func() {
			if !left {
				p.leaveLayers(c, d, len(p.layers), errPanicked)
			}
		}()
		r, err = next(ctx, c, d)
		left = true
		p.leaveLayers(c, d, len(p.layers), err)
		return r, err
	}
}

// enterLayers runs the layers' enter halves, outermost first, and returns
// the refusal of the one that refused, if one did. The layers entered
// before it are left with that refusal, or with errPanicked when an enter
// half panics (the panic goes on): after enterLayers, either every layer
// is entered or none is.
func (p *pipeline) enterLayers(c *conn, d *delivery) (err error) {
	n, done := 0, false
	defer func() {
		if !done {
			p.leaveLayers(c, d, n, errPanicked)
		}
	}()
	for ; n < len(p.layers); n++ {
		if err = p.layers[n].enter(c, d); err != nil {
			break
		}
	}
	done = true
	if err != nil {
		p.leaveLayers(c, d, n, err)
	}
	return err
}

// leaveLayers runs the leave halves of the first n layers, innermost
// first, with the attempt's outcome err. When one panics, the layers
// outside it are still left, with errPanicked, and the panic goes on.
func (p *pipeline) leaveLayers(c *conn, d *delivery, n int, err error) {
	defer func() {
		if n > 0 {
			p.leaveLayers(c, d, n, errPanicked)
		}
	}()
	for n > 0 {
		n--
		p.layers[n].leave(c, d, err)
	}
}

// deliver makes one delivery to c, unmeasured: pipeline.deliver measures
// its own, and another node of a cluster those it asks this one to make.
func (c *conn) deliver(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
	return c.server.pipe.deliverLocal(ctx, c, d)
}

// Failure kinds of a delivery, also its metrics outcome.
const (
	failTimeout      = "timeout"
	failDisconnected = "disconnected"
	failError        = "error"
	failBadResult    = "bad_result"
	// failNotSent: the subscriber's connection was closing and the call
	// was never written, so the subscriber never saw the message; the
	// walk settles it as if the subscription were gone (settle).
	failNotSent = "not_sent"
)

// deliveryError says why a delivery got no usable answer.
type deliveryError struct {
	Kind   string // one of the fail… constants, or a reason such as subscriber_gone
	Detail string
}

func (e *deliveryError) Error() string {
	return e.Kind + ": " + e.Detail
}

// call sends processMessage to the subscriber's connection and waits for
// its answer. The params are encoded by hand around the payload and meta,
// which go out byte for byte as the publisher sent them, and the answer
// comes back through the Stream, not jsonrpc2's codec.
func (p *pipeline) call(ctx context.Context, c *conn, d *delivery) (protocol.ProcessMessageResult, error) {
	written := d.written
	if d.turn != nil {
		written = d.turn.pass
	}
	raw, err := c.stream.CallAppend(ctx, protocol.MethodProcessMessage, d, written)
	return p.callResult(raw, err)
}

// callResult turns the answer to a processMessage call, or the call's
// failure, into the delivery's result or *deliveryError.
func (p *pipeline) callResult(raw json.RawMessage, err error) (protocol.ProcessMessageResult, error) {
	var result protocol.ProcessMessageResult
	switch {
	case err == nil:
		if !protocol.IsObject(raw) {
			return result, &deliveryError{failBadResult, fmt.Sprintf("processMessage result must be an object, got %.64s", raw)}
		}
		// Read in place, as json.Unmarshal would decode it (the Stream
		// checked the message): reflection and strconv.ParseFloat's stack
		// growth were a tenth of the bus's CPU per stored retry.
		result, err := protocol.ScanProcessMessageResult(raw)
		if err != nil {
			return result, &deliveryError{failBadResult, fmt.Sprintf("processMessage result: %v", err)}
		}
		return result, nil
	}
	return result, p.callFailure(err)
}

// callFailure is callResult's error for a call that got no result. A
// function of its own, so that errors.As's target, which it moves to the
// heap, is not allocated for every answer.
func (p *pipeline) callFailure(err error) error {
	var rerr *rpcstream.ResponseError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &deliveryError{failTimeout, fmt.Sprintf("no answer within %s", p.deliveryTimeout)}
	case errors.As(err, &rerr):
		return &deliveryError{failError, fmt.Sprintf("subscriber answered error %d: %s", rerr.Code, rerr.Message)}
	case errors.Is(err, rpcstream.ErrNotSent):
		return &deliveryError{failNotSent, "the subscriber's connection was closing; the message was not sent to it"}
	case errors.Is(err, rpcstream.ErrClosed):
		return &deliveryError{failDisconnected, "connection closed before the subscriber answered"}
	default:
		return &deliveryError{failDisconnected, err.Error()}
	}
}

// AppendParams appends d's processMessage params, the bytes
// json.Marshal(protocol.ProcessMessageParams{...}) gives for a compact
// payload and meta, without encoding/json's pass over them. The Stream
// calls it to build the frame, so the payload is copied once per delivery,
// into a buffer that is free again once the frame is written.
func (d *delivery) AppendParams(dst []byte) []byte {
	if d.params != nil {
		return append(dst, d.params...)
	}
	if d.shared != nil {
		dst = append(dst, d.shared.head...)
		dst = protocol.AppendJSONString(dst, d.Subscription)
		return append(dst, d.shared.tail...)
	}
	dst = appendParamsHead(dst, d.Message)
	dst = protocol.AppendJSONString(dst, d.Subscription)
	return appendParamsTail(dst, d.Message, d.Attempt)
}

// appendParamsHead appends the params up to the subscription's value.
func appendParamsHead(dst []byte, m *store.Message) []byte {
	dst = append(dst, `{"topic":`...)
	dst = protocol.AppendJSONString(dst, m.Topic)
	return append(dst, `,"subscription":`...)
}

// appendParamsTail appends the params after the subscription's value:
// the payload, the only part that can be large, among them.
func appendParamsTail(dst []byte, m *store.Message, attempt int) []byte {
	dst = append(dst, `,"payload":`...)
	if len(m.Payload) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, m.Payload...)
	}
	dst = append(dst, `,"messageId":`...)
	dst = protocol.AppendJSONString(dst, m.ID)
	dst = append(dst, `,"from":`...)
	dst = protocol.AppendJSONString(dst, m.From)
	if len(m.Meta) > 0 {
		dst = append(dst, `,"meta":`...)
		dst = append(dst, m.Meta...)
	}
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendInt(dst, int64(attempt), 10)
	return append(dst, '}')
}

// sharedParams are the processMessage params of a walk's first attempts
// but for the subscription pattern, which differs per subscriber (a
// chain holds each pattern once). Encoded once per walk, they spare a
// fan-out to n subscribers n-1 encodings of the payload; the deliveries
// read them concurrently and the walk releases them when all are done.
type sharedParams struct {
	head, tail []byte
	buf        *[]byte
}

// paramsPool holds the buffers params and results are encoded in.
var paramsPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledParams bounds the buffers paramsPool keeps, so one huge
// message does not pin its buffer for good.
const maxPooledParams = 256 << 10

func newSharedParams(m *store.Message) *sharedParams {
	bp := paramsPool.Get().(*[]byte)
	buf := appendParamsHead((*bp)[:0], m)
	head := len(buf)
	buf = appendParamsTail(buf, m, 1)
	*bp = buf
	return &sharedParams{head: buf[:head], tail: buf[head:], buf: bp}
}

func (p *sharedParams) release() {
	putParams(p.buf, *p.buf)
}

// putParams gives bp back to paramsPool, holding b, what was appended to
// it, unless b grew past maxPooledParams.
func putParams(bp *[]byte, b []byte) {
	if cap(b) <= maxPooledParams {
		*bp = b
		paramsPool.Put(bp)
	}
}

// timeout bounds each attempt by Options.DeliveryTimeout. The calls a
// walk writes itself (walk.go), which no goroutine waits on, are bounded
// by the same timeout with the walk's timer, which abandons a call as the
// Stream does when ctx ends: callResult reads both as a timeout.
func (p *pipeline) timeout(next localFunc) localFunc {
	return func(ctx context.Context, c *conn, d *delivery) (protocol.ProcessMessageResult, error) {
		ctx, cancel := context.WithTimeout(ctx, p.deliveryTimeout)
		defer cancel()
		return next(ctx, c, d)
	}
}

// measure counts deliveries by outcome and observes their latency.
func (p *pipeline) measure(next deliverFunc) deliverFunc {
	return func(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
		start := time.Now()
		r, err := next(ctx, d)
		p.measured(d, start, r, err)
		return r, err
	}
}

// measured counts a delivery that began at start by outcome, observes its
// latency and tells the observers.
func (p *pipeline) measured(d *delivery, start time.Time, r protocol.ProcessMessageResult, err error) {
	p.metrics.deliveryDuration.Observe(time.Since(start).Seconds())
	outcome := deliveryOutcome(r, err)
	p.metrics.deliveries.WithLabelValues(outcome).Inc()
	p.observers.emitDelivery(d, outcome, err)
}

// deliveryOutcome names a delivery's outcome, as the deliveries metric
// and the delivery's span say it.
func deliveryOutcome(r protocol.ProcessMessageResult, err error) string {
	switch {
	case err != nil:
		// failKind, since errors.As's target would be allocated for
		// every delivery, failed or not, if it were declared here.
		return cmp.Or(failKind(err), failError)
	case r.Handled():
		return "processed"
	case r.Rejected():
		return protocol.ReasonRejected
	}
	return "not_processed"
}
