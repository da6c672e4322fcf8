package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// Handler handles the deliveries of one subscription and says how it went.
//
// Returning an error means the message could not be handled at all: the bus
// records a failed delivery with the error's text, as it does for a
// timeout. A handler that understood the message but declines or defers it
// returns a Result with Processed false instead: with ShouldRetry to have
// it again later, with Reject to refuse it for good.
//
// Handlers run on goroutines of their own, several at once (see
// Options.MaxConcurrentHandlers), and may call any method of the Conn but
// Close. ctx is cancelled after Options.HandlerTimeout (by default a
// little less than the bus's delivery timeout) or when the Conn ends.
type Handler func(ctx context.Context, d *Delivery) (Result, error)

// Delivery is one message as the bus delivered it to a subscription.
type Delivery struct {
	// Topic is the topic the message was published to.
	Topic string
	// Subscription is the pattern whose subscription matched.
	Subscription string
	// MessageID is the bus's id of the message; a redelivery keeps it.
	MessageID string
	// From is the publisher's clientId, as the bus knows it.
	From string
	// Payload is the message, a JSON object with a string "type".
	Payload json.RawMessage
	// Meta is the publisher's meta object (traceparent, tracestate), or
	// nil.
	Meta json.RawMessage
	// Attempt counts deliveries of this message to this subscriber,
	// from 1.
	Attempt int
	// Conn is the connection the message came on; a handler replies
	// through it. It is set even when the handler runs before Dial or
	// DialEnv has returned, as it can for a message the bus held for the
	// agent and delivers the moment it subscribes.
	Conn *Conn
}

// Type returns the payload's "type", or "" when it has none.
func (d *Delivery) Type() string {
	typ, _ := protocol.PayloadType(d.Payload)
	return typ
}

// Decode unmarshals the payload into v.
func (d *Delivery) Decode(v any) error {
	if err := json.Unmarshal(d.Payload, v); err != nil {
		return fmt.Errorf("decode payload of message %s on %s: %w", d.MessageID, d.Topic, err)
	}
	return nil
}

// Result is a handler's answer to a delivery, which the bus relays to the
// publisher in the message's ack and which its propagation policy reads.
type Result struct {
	// Processed says the handler handled the message. Under the default
	// policy, stopPropagationOnProcessed, it stops the message from going
	// on to older matching subscriptions.
	Processed bool
	// StopPropagation stops the message from going on to older matching
	// subscriptions under every policy but continueAll.
	StopPropagation bool
	// ShouldRetry asks the bus to deliver the message again after
	// RetryAfter.
	ShouldRetry bool
	// RetryAfter is the delay ShouldRetry asks for; the wire carries it
	// in seconds.
	RetryAfter time.Duration
	// Reject refuses the message for good, on any attempt, the first
	// included: the bus puts it in the dead-letter queue at once, with
	// reason "rejected" and Message as the reason given, unless another
	// subscriber handled it. It outweighs ShouldRetry and is ignored
	// with Processed. Use it for a message that can never succeed (a
	// chat that blocked the bot, a payload this handler cannot take), so
	// an operator finds it rather than the publisher alone.
	Reject bool
	// Message is a human-readable status, relayed in the ack; with
	// Reject, the reason the dead letter records.
	Message string
}

// wire returns the processMessage result that carries r.
func (r Result) wire() protocol.ProcessMessageResult {
	return protocol.ProcessMessageResult{
		Processed:       r.Processed,
		ShouldRetry:     r.ShouldRetry,
		RetrySeconds:    r.RetryAfter.Seconds(),
		Reject:          r.Reject,
		Message:         r.Message,
		StopPropagation: r.StopPropagation,
	}
}

// handlerBudget returns how long a handler may run under limits, the
// bus's announced bounds: its delivery timeout less a tenth, and less at
// most a second, which leaves the answer time to reach the bus (29s of
// the default 30s; 900ms of 1s). A bus that announces no delivery timeout
// is taken to have the default, 30s. It is the default of
// Options.HandlerTimeout.
func handlerBudget(limits protocol.Limits) time.Duration {
	timeout := time.Duration(limits.DeliveryTimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = defaultDeliveryTimeout
	}
	return timeout - min(timeout/10, time.Second)
}

// defaultDeliveryTimeout is the bus's default delivery timeout (bub serve
// --delivery-timeout), assumed of a bus that does not announce one.
const defaultDeliveryTimeout = 30 * time.Second

// busyRetryAfter is how long a delivery refused for want of a handler slot
// asks the bus to wait.
const busyRetryAfter = time.Second

// read is a session's read loop. It hands requests to serve and, inside
// the Stream, answers to the Conn's own calls to their callers; it ends
// when the connection does.
func (c *Conn) read(s *session) {
	defer close(s.done)
	for {
		req, err := s.stream.ReadRequest()
		if err != nil {
			s.err = err
			return
		}
		if !req.Notif() {
			c.serve(s, req)
		}
	}
}

// serve answers one call of the bus, exactly once, as rpcstream requires.
// It runs on the read loop, so it only decodes and hands over: a handler
// that blocked here would also hold up the answers to the Conn's own
// calls.
func (c *Conn) serve(s *session, req *rpcstream.Request) {
	method, params := req.Method, req.Params
	if method != protocol.MethodProcessMessage {
		s.replyError(req.ID, protocol.Errorf(protocol.ErrMethodNotFound, "a peer serves only %s, not %q", protocol.MethodProcessMessage, method))
		return
	}
	// Read in place, not by json.Unmarshal: the Stream has checked the
	// whole message, and the payload and meta handed to the handler are
	// slices of the message's own buffer, which the Stream never reuses,
	// instead of copies made through reflection (about a third of a
	// subscriber's CPU per delivery, docs/BENCHMARKS.md).
	p, err := protocol.ScanProcessMessage(params)
	if params == nil || err != nil {
		s.replyError(req.ID, protocol.Errorf(protocol.ErrInvalidParams, "%s needs params {topic, subscription, payload, messageId, from, attempt}", method))
		return
	}
	sub := c.subscription(p.Subscription)
	if sub == nil {
		if s.isUnsure(p.Subscription) {
			// A subscribe that timed out after the bus applied it: no
			// handler here, yet the bus routes to it. Ask for the
			// message again rather than let it be lost to this
			// subscription; a Subscribe retried meanwhile handles it,
			// and if none comes it ends in the dead-letter queue.
			s.replyResult(req.ID, Result{ShouldRetry: true, Message: fmt.Sprintf("subscription %q not confirmed here yet", p.Subscription)})
			return
		}
		// Unsubscribed while the message was on its way: not ours to
		// handle, so let it propagate.
		s.replyResult(req.ID, Result{Message: fmt.Sprintf("no subscription to %q here", p.Subscription)})
		return
	}
	slots := c.slots
	if sub.slots != nil {
		slots = sub.slots
	}
	select {
	case slots <- struct{}{}:
	default:
		s.replyResult(req.ID, Result{
			ShouldRetry: true,
			RetryAfter:  busyRetryAfter,
			Message:     fmt.Sprintf("busy: %d handlers already running", cap(slots)),
		})
		return
	}
	if !c.startWork() {
		<-slots
		s.replyError(req.ID, protocol.Errorf(protocol.ErrShuttingDown, "client %q is closing", c.opts.ClientID))
		return
	}
	d := &Delivery{
		Topic:        p.Topic,
		Subscription: p.Subscription,
		MessageID:    p.MessageID,
		From:         p.From,
		Payload:      p.Payload,
		Meta:         p.Meta,
		Attempt:      p.Attempt,
		Conn:         c,
	}
	go c.handle(s, req.ID, sub, slots, d)
}

// handle runs sub's handler on d, on a goroutine of its own, and answers
// the bus's call id with what it returns; it gives back its place in
// slots, the bound it was counted against.
func (c *Conn) handle(s *session, id string, sub *subscription, slots chan struct{}, d *Delivery) {
	defer c.work.Done()
	defer func() { <-slots }()
	result, err := c.runHandler(sub, d)
	if err != nil {
		s.replyError(id, err)
		return
	}
	s.replyResult(id, result)
}

// startWork counts a goroutine in c.work, unless the Conn has ended.
func (c *Conn) startWork() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return false
	}
	c.work.Add(1)
	return true
}

// runHandler runs sub's handler with its deadline, turning a panic into an
// error so one bad message cannot take the process down.
func (c *Conn) runHandler(sub *subscription, d *Delivery) (result Result, err error) {
	timeout := c.opts.HandlerTimeout
	if timeout <= 0 {
		timeout = handlerBudget(c.Limits())
	}
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			c.log.Error("handler panicked", "subscription", sub.pattern, "topic", d.Topic, "message_id", d.MessageID, "panic", v, "stack", string(debug.Stack()))
			err = protocol.Errorf(protocol.ErrInternal, "handler for %q panicked: %v", sub.pattern, v)
		}
	}()
	return sub.handler(ctx, d)
}

// replyResult answers the bus's call id with r. A reply that cannot be
// written is lost with its connection; the bus records the delivery as
// failed.
func (s *session) replyResult(id string, r Result) {
	// Encoded on the stack and written as it is: every delivery's answer
	// is one, and json.Marshal would only check and copy it again.
	var buf [128]byte
	_ = s.stream.ReplyRaw(id, r.appendWire(buf[:0]))
}

// replyError answers the bus's call id with err, as a JSON-RPC error.
func (s *session) replyError(id string, err error) {
	_ = s.stream.Reply(id, nil, protocol.WireError(err))
}

// appendWire appends the processMessage result that carries r, the bytes
// json.Marshal(r.wire()) writes but for the escaping of <, > and & in
// Message (both are the same JSON string), without reflection: every
// delivery's answer is one.
func (r Result) appendWire(b []byte) []byte {
	w := r.wire()
	b = strconv.AppendBool(append(b, `{"processed":`...), w.Processed)
	b = strconv.AppendBool(append(b, `,"should_retry":`...), w.ShouldRetry)
	b = append(b, `,"retry_seconds":`...)
	if f := w.RetrySeconds; f == 0 || (f >= 1e-6 && f < 1e21) {
		// encoding/json's format for floats in this range.
		b = strconv.AppendFloat(b, f, 'f', -1, 64)
	} else {
		enc, _ := json.Marshal(f) // a finite float always marshals
		b = append(b, enc...)
	}
	if w.Reject {
		b = append(b, `,"reject":true`...)
	}
	if w.Message != "" {
		b = appendString(append(b, `,"message":`...), w.Message)
	}
	b = strconv.AppendBool(append(b, `,"stopPropagation":`...), w.StopPropagation)
	return append(b, '}')
}
