package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/bub-bus/bub/protocol"
)

// Handler handles the deliveries of one subscription and says how it went.
//
// Returning an error means the message could not be handled at all: the bus
// records a failed delivery with the error's text, as it does for a
// timeout. A handler that understood the message but declines or defers it
// returns a Result with Processed false (and ShouldRetry) instead.
//
// Handlers run on goroutines of their own, several at once (see
// Options.MaxConcurrentHandlers), and may call any method of the Conn but
// Close. ctx is cancelled after Options.HandlerTimeout or when the Conn
// ends.
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
	// Message is a human-readable status, relayed in the ack.
	Message string
}

// wire returns the processMessage result that carries r.
func (r Result) wire() protocol.ProcessMessageResult {
	return protocol.ProcessMessageResult{
		Processed:       r.Processed,
		ShouldRetry:     r.ShouldRetry,
		RetrySeconds:    r.RetryAfter.Seconds(),
		Message:         r.Message,
		StopPropagation: r.StopPropagation,
	}
}

// busyRetryAfter is how long a delivery refused for want of a handler slot
// asks the bus to wait.
const busyRetryAfter = time.Second

// inbound answers the bus's calls on a Conn. It runs on jsonrpc2's read
// loop, so it only decodes and hands over: a handler that blocked here
// would also hold up the answers to the Conn's own calls.
type inbound struct{ c *Conn }

// Handle implements jsonrpc2.Handler. Every request gets exactly one
// answer, as rpcstream requires.
func (h inbound) Handle(_ context.Context, rpc *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if req.Notif {
		return
	}
	c := h.c
	if req.Method != protocol.MethodProcessMessage {
		reply(rpc, req, nil, protocol.Errorf(protocol.ErrMethodNotFound, "a peer serves only %s, not %q", protocol.MethodProcessMessage, req.Method))
		return
	}
	var p protocol.ProcessMessageParams
	if req.Params == nil || json.Unmarshal(*req.Params, &p) != nil {
		reply(rpc, req, nil, protocol.Errorf(protocol.ErrInvalidParams, "%s needs params {topic, subscription, payload, messageId, from, attempt}", req.Method))
		return
	}
	sub := c.subscription(p.Subscription)
	if sub == nil {
		// Unsubscribed while the message was on its way: not ours to
		// handle, so let it propagate.
		reply(rpc, req, Result{Message: fmt.Sprintf("no subscription to %q here", p.Subscription)}.wire(), nil)
		return
	}
	select {
	case c.slots <- struct{}{}:
	default:
		reply(rpc, req, Result{
			ShouldRetry: true,
			RetryAfter:  busyRetryAfter,
			Message:     fmt.Sprintf("busy: %d handlers already running", cap(c.slots)),
		}.wire(), nil)
		return
	}
	if !c.startWork() {
		<-c.slots
		reply(rpc, req, nil, protocol.Errorf(protocol.ErrShuttingDown, "client %q is closing", c.opts.ClientID))
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
	go func() {
		defer c.work.Done()
		defer func() { <-c.slots }()
		result, err := c.runHandler(sub, d)
		if err != nil {
			reply(rpc, req, nil, err)
			return
		}
		reply(rpc, req, result.wire(), nil)
	}()
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
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.HandlerTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			c.log.Error("handler panicked", "subscription", sub.pattern, "topic", d.Topic, "message_id", d.MessageID, "panic", v, "stack", string(debug.Stack()))
			err = protocol.Errorf(protocol.ErrInternal, "handler for %q panicked: %v", sub.pattern, v)
		}
	}()
	return sub.handler(ctx, d)
}

// reply answers req with result, or with err as a JSON-RPC error.
func reply(rpc *jsonrpc2.Conn, req *jsonrpc2.Request, result any, err error) {
	// A reply that cannot be written is lost with its connection; the
	// bus records the delivery as failed.
	if err == nil {
		_ = rpc.Reply(context.Background(), req.ID, result)
		return
	}
	werr := protocol.WireError(err)
	rerr := &jsonrpc2.Error{Code: werr.Code, Message: werr.Message}
	if werr.Data != nil {
		rerr.SetError(werr.Data)
	}
	_ = rpc.ReplyWithError(context.Background(), req.ID, rerr)
}
