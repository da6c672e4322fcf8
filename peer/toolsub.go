package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/bub-bus/bub/protocol"
)

// Tool subscriptions (docs/PROTOCOL.md, "Tool subscriptions"): an agent
// starts one with SubscribeTool (or StartToolSubscription and a tool call
// of its own), and each event the tool posts reaches the agent as a
// message on the subscription's topic, woken by the spawner if it is
// hibernated; Delivery.SubscriptionEvent reads it. A tool reads the call
// with Delivery.ToolCall, answers with ToolResultOf, and posts events
// with PostSubscriptionEvent, or, as a bus peer, SendSubscriptionEvent.

// ErrSubscriptionGone says the bus knows no active subscription for a
// callback: it was cancelled, ended by a final event, or never made. A
// tool stops sending events for it.
var ErrSubscriptionGone = errors.New("tool subscription gone")

// ToolSubscription is an active tool subscription and its callback.
type ToolSubscription struct {
	GroupID    string
	ToolCallID string
	// Topic is where the bus delivers its events.
	Topic string
	// CallbackURL is where a tool POSTs its events.
	CallbackURL string
	// CallbackTopic is where a tool that is a bus peer sends them
	// instead.
	CallbackTopic string
	// Result is the tool's answer to the call (SubscribeTool only).
	Result *protocol.ToolResult
}

// ToolSubscriptionOptions are the options of StartToolSubscription and
// SubscribeTool; nil means all defaults.
type ToolSubscriptionOptions struct {
	// Topic is where the events are delivered, a topic the agent
	// subscribes to (and may publish to). Default: the agent's own
	// topic, agent:{clientId}, which the bus holds while nobody
	// subscribes to it and the spawner wakes a hibernated agent for.
	Topic string
	// Tool is the tool's topic, which a cancel notifies; SubscribeTool
	// sets it.
	Tool string
	// BaseURL is the bus's HTTP address as the tool reaches it, for the
	// callback URL. Default: the first address Dial was given, ws://
	// read as http:// and wss:// as https://.
	BaseURL string
}

// StartToolSubscription records a subscription of thread groupID's tool
// call toolCallID on the bus (toolSubscriptions.start) and returns its
// callback, to hand the tool. Errors are the bus's answer: -32011 past
// the thread's limit, -32602 for a tool call already subscribed.
func (c *Conn) StartToolSubscription(ctx context.Context, groupID, toolCallID string, opts *ToolSubscriptionOptions) (*ToolSubscription, error) {
	var o ToolSubscriptionOptions
	if opts != nil {
		o = *opts
	}
	if o.Topic == "" {
		o.Topic = AgentTopic(c.opts.ClientID)
	}
	base := o.BaseURL
	if base == "" {
		base = httpBase(c.urls[0])
	}
	var r protocol.ToolSubscriptionStartResult
	params := protocol.ToolSubscriptionStartParams{GroupID: groupID, ToolCallID: toolCallID, Topic: o.Topic, Tool: o.Tool}
	if err := c.call(ctx, protocol.MethodToolSubscriptionStart, params, &r); err != nil {
		return nil, err
	}
	return &ToolSubscription{
		GroupID: groupID, ToolCallID: toolCallID, Topic: o.Topic,
		CallbackURL: base + r.CallbackPath, CallbackTopic: r.CallbackTopic,
	}, nil
}

// SubscribeTool runs the seed's lifecycle: it starts a subscription,
// sends the tool on topic tool a tool_call with arguments and the
// callback, and reads the tool_result from the tool's ack. A tool that
// does not answer with "subscription": true gets its subscription
// cancelled, and the error says why.
func (c *Conn) SubscribeTool(ctx context.Context, tool, groupID, toolCallID string, arguments any, opts *ToolSubscriptionOptions) (*ToolSubscription, error) {
	var o ToolSubscriptionOptions
	if opts != nil {
		o = *opts
	}
	o.Tool = tool
	args, err := json.Marshal(arguments)
	if err != nil {
		return nil, fmt.Errorf("subscribe tool %s: encode arguments: %w", tool, err)
	}
	sub, err := c.StartToolSubscription(ctx, groupID, toolCallID, &o)
	if err != nil {
		return nil, fmt.Errorf("subscribe tool %s: %w", tool, err)
	}
	call := protocol.ToolCall{Type: protocol.TypeToolCall, ID: toolCallID, GroupID: groupID, Arguments: args, CallbackURL: sub.CallbackURL, CallbackTopic: sub.CallbackTopic}
	result, err := c.callTool(ctx, tool, &call)
	if err == nil && !result.Subscription {
		err = fmt.Errorf("the tool started no subscription: %q", result.Text)
	}
	if err != nil {
		if _, cerr := c.CancelToolSubscription(ctx, groupID, toolCallID); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cancel: %w", cerr))
		}
		return nil, fmt.Errorf("subscribe tool %s: %w", tool, err)
	}
	sub.Result = result
	return sub, nil
}

// callTool sends call to the tool and returns the tool_result of its
// ack.
func (c *Conn) callTool(ctx context.Context, tool string, call *protocol.ToolCall) (*protocol.ToolResult, error) {
	res, err := c.SendMessage(ctx, tool, call, nil)
	if err != nil {
		return nil, err
	}
	for _, ack := range res.Acks {
		if !ack.Processed {
			continue
		}
		var r protocol.ToolResult
		if err := json.Unmarshal([]byte(ack.Message), &r); err != nil || r.Type != protocol.TypeToolResult {
			return nil, fmt.Errorf("the ack of %s is no tool_result: %q", ack.ClientID, ack.Message)
		}
		if r.IsError {
			return nil, fmt.Errorf("the tool failed: %s", r.Text)
		}
		return &r, nil
	}
	return nil, fmt.Errorf("no tool processed the call on %s (%s)", tool, res.Reason)
}

// CancelToolSubscription cancels a subscription (toolSubscriptions.cancel):
// once it returns, no event of it is delivered, and the tool was sent
// cancel_tool_call if its topic is known and someone subscribes there.
// A subscription the thread does not have is -32008.
func (c *Conn) CancelToolSubscription(ctx context.Context, groupID, toolCallID string) (*protocol.ToolSubscriptionCancelResult, error) {
	var r protocol.ToolSubscriptionCancelResult
	err := c.call(ctx, protocol.MethodToolSubscriptionCancel, protocol.ToolSubscriptionCancelParams{GroupID: groupID, ToolCallID: toolCallID}, &r)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// ToolSubscriptions lists this client's active tool subscriptions, of
// thread groupID ("" for all); an admin of a bus with auth gets every
// client's.
func (c *Conn) ToolSubscriptions(ctx context.Context, groupID string) ([]protocol.ToolSubscription, error) {
	var r protocol.ToolSubscriptionListResult
	if err := c.call(ctx, protocol.MethodToolSubscriptionList, protocol.ToolSubscriptionListParams{GroupID: groupID}, &r); err != nil {
		return nil, err
	}
	return r.Subscriptions, nil
}

// SubscriptionEvent returns the delivery's subscription_event; false for
// another payload or one that is no valid event.
func (d *Delivery) SubscriptionEvent() (*protocol.SubscriptionEvent, bool) {
	if d.Type() != protocol.TypeSubscriptionEvent {
		return nil, false
	}
	ev, err := protocol.ParseSubscriptionEvent(d.Payload)
	return ev, err == nil
}

// ToolCall returns the delivery's tool_call, for a tool; false for
// another payload.
func (d *Delivery) ToolCall() (*protocol.ToolCall, bool) {
	if d.Type() != protocol.TypeToolCall {
		return nil, false
	}
	var call protocol.ToolCall
	if err := d.Decode(&call); err != nil || call.ID == "" || call.GroupID == "" {
		return nil, false
	}
	return &call, true
}

// ToolResultOf is the Result that answers a tool call with r: processed,
// with r as the ack's message, where SubscribeTool reads it.
func ToolResultOf(r protocol.ToolResult) Result {
	r.Type = protocol.TypeToolResult
	b, _ := json.Marshal(r)
	return Result{Processed: true, Message: string(b)}
}

// CallbackError is a callback's refusal of an event other than
// ErrSubscriptionGone: the HTTP status, the bus's error, and for 429 and
// 503 how long to wait before posting it again.
type CallbackError struct {
	Status     int
	Message    string
	RetryAfter time.Duration
}

func (e *CallbackError) Error() string {
	return fmt.Sprintf("callback answered %d: %s", e.Status, e.Message)
}

// PostSubscriptionEvent POSTs ev to a callback URL, with client (nil:
// http.DefaultClient), and returns nil once the bus took it. ev's Type is
// set for the caller. Errors: ErrSubscriptionGone (404: send no more),
// *CallbackError for another refusal (Status 400: the event is wrong;
// 429 and 503: post it again after RetryAfter), or the transport's.
func PostSubscriptionEvent(ctx context.Context, client *http.Client, callbackURL string, ev protocol.SubscriptionEvent) error {
	if client == nil {
		client = http.DefaultClient
	}
	ev.Type = protocol.TypeSubscriptionEvent
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, callbackURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("post event: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		// The error names the URL, whose path is the callback's secret.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("post event: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusNotFound:
		return ErrSubscriptionGone
	}
	e := &CallbackError{Status: resp.StatusCode, Message: string(bytes.TrimSpace(answer))}
	var werr struct {
		Error *protocol.Error `json:"error"`
	}
	if json.Unmarshal(answer, &werr) == nil && werr.Error != nil {
		e.Message = werr.Error.Message
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// SendSubscriptionEvent sends ev to a callback topic, for a tool that is
// a bus peer, and returns nil once the bus took it. ev's Type is set for
// the caller. Errors: ErrSubscriptionGone, or the bus's answer.
func (c *Conn) SendSubscriptionEvent(ctx context.Context, callbackTopic string, ev protocol.SubscriptionEvent) error {
	ev.Type = protocol.TypeSubscriptionEvent
	_, err := c.SendMessage(ctx, callbackTopic, ev, nil)
	if protocol.CodeOf(err) == protocol.CodeNotFound {
		return fmt.Errorf("%w: %w", ErrSubscriptionGone, err)
	}
	return err
}

// httpBase is the http(s):// scheme and host of a bus address.
func httpBase(busURL string) string {
	u, err := url.Parse(busURL)
	if err != nil {
		return ""
	}
	scheme := "http"
	if u.Scheme == "wss" || u.Scheme == "https" {
		scheme = "https"
	}
	return scheme + "://" + u.Host
}
