package toolsub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/httpjson"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// PathCallbacks starts the path a tool posts a subscription's events to:
// POST /v1/callbacks/{id} (docs/PROTOCOL.md, "Tool subscriptions").
const PathCallbacks = protocol.PathCallbacks

// Outcomes of bub_tool_events_total.
const (
	eventDelivered   = "delivered"
	eventOrphaned    = "orphaned"
	eventUnknown     = "unknown"
	eventMalformed   = "malformed"
	eventMismatch    = "mismatch"
	eventRateLimited = "rate_limited"
	eventFailed      = "failed"
)

// serveCallback takes a subscription_event a tool posts to its callback.
// The id in the path is the credential: no Authorization is needed, and
// one that is no active subscription's is 404. Answers: 200 with the
// outcome (delivered, or orphaned: its thread has nobody, logged and
// discarded), 400 naming the field at fault, 404, 405, 413, 429 with
// Retry-After over the subscription's rate, 503 while the bus drains.
func (t *subscriptions) serveCallback(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, PathCallbacks)
	if id == "" || strings.Contains(id, "/") {
		t.events.WithLabelValues(eventUnknown).Inc()
		httpjson.WriteError(w, http.StatusNotFound, protocol.Errorf(protocol.ErrNotFound, "no such callback: the path is %s{id}", PathCallbacks))
		return
	}
	if r.Method != http.MethodPost {
		httpjson.MethodNotAllowed(w, http.MethodPost)
		return
	}
	if err := t.s.CheckBrowser(r); err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	// The body's checks are the event parser's
	// (protocol.ParseSubscriptionEvent), which names the field at fault.
	limit := t.s.Options().MaxMessageBytes
	var body bytes.Buffer
	if _, err := body.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			httpjson.WriteError(w, http.StatusRequestEntityTooLarge, protocol.Errorf(protocol.ErrLimitReached, "body is more than %d bytes (--max-message-bytes)", limit))
			return
		}
		httpjson.WriteError(w, 0, protocol.Errorf(protocol.ErrParse, "read body: %v", err))
		return
	}
	answer, err := t.event(id, body.Bytes())
	switch {
	case protocol.CodeOf(err) == protocol.CodeNotFound:
		httpjson.WriteError(w, http.StatusNotFound, err)
	case err != nil:
		httpjson.WriteError(w, 0, err)
	default:
		httpjson.Write(w, http.StatusOK, answer)
	}
}

// callbackEvent takes a sendMessage to callback:{id} (a
// bus.CallbackFunc): a tool that is a bus peer posting an event. The
// answer is sendMessage's result, success once the event is accepted.
func (t *subscriptions) callbackEvent(id string, payload []byte) (*protocol.SendMessageResult, error) {
	answer, err := t.event(id, payload)
	if err != nil {
		return nil, err
	}
	res := &protocol.SendMessageResult{MessageID: answer.MessageID, Success: answer.Status == eventDelivered, Acks: []protocol.Ack{}}
	if answer.Status == eventOrphaned {
		res.Reason = eventOrphaned
	}
	return res, nil
}

// eventAnswer is the body of a callback's 200.
type eventAnswer struct {
	// Status is "delivered" (published on the subscription's topic; a
	// spawner's wake and retries follow) or "orphaned" (its thread has
	// nobody to take it: logged and discarded).
	Status    string `json:"status"`
	MessageID string `json:"messageId,omitempty"`
}

// event takes one event posted to callback id (by HTTP or on the
// callback topic): body must be a subscription_event of that callback's
// subscription. Errors: -32008 for no active subscription, -32602
// naming the field, -32012 over the subscription's rate, and what the
// publish answers.
func (t *subscriptions) event(id string, body []byte) (*eventAnswer, error) {
	ts, err := t.lookup(id)
	if err != nil {
		t.events.WithLabelValues(eventFailed).Inc()
		return nil, protocol.Errorf(protocol.ErrInternal, "read tool subscription: %v", err)
	}
	if ts == nil {
		t.events.WithLabelValues(eventUnknown).Inc()
		t.s.Options().Logger.Info("tool event discarded: no active subscription has its callback (cancelled, final, or never made)")
		return nil, protocol.Errorf(protocol.ErrNotFound, "no active tool subscription has this callback: it was cancelled, ended by a final event, or never made; send no more events")
	}
	if err := rpcstream.CheckUTF8("the event", body); err != nil {
		t.events.WithLabelValues(eventMalformed).Inc()
		return nil, err
	}
	ev, err := protocol.ParseSubscriptionEvent(body)
	if err != nil {
		t.events.WithLabelValues(eventMalformed).Inc()
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "subscription_event: %v", err)
	}
	switch {
	case ev.GroupID != ts.GroupID:
		t.events.WithLabelValues(eventMismatch).Inc()
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "subscription_event: group_id %q is not the thread of this callback's subscription", ev.GroupID)
	case ev.ToolCallID != ts.ToolCallID:
		t.events.WithLabelValues(eventMismatch).Inc()
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "subscription_event: tool_call_id %q is not the tool call of this callback's subscription", ev.ToolCallID)
	}
	gone := func() error {
		t.events.WithLabelValues(eventUnknown).Inc()
		return protocol.Errorf(protocol.ErrNotFound, "the subscription of this callback was cancelled or ended by a final event; send no more events")
	}
	live := t.liveOf(ts)
	if live == nil {
		return nil, gone()
	}
	if r := live.limiter.Reserve(); r.Delay() > 0 {
		wait := r.Delay()
		r.Cancel()
		t.events.WithLabelValues(eventRateLimited).Inc()
		return nil, bus.RateLimitedError(wait, "this subscription's events come faster than --tool-event-rate")
	}
	live.order.Lock()
	defer live.order.Unlock()
	if live.ended {
		return nil, gone()
	}
	// A final event ends the subscription before it is published: none
	// after it goes through, and an agent that lists its subscriptions
	// once it has the event no longer finds it. A publish that fails
	// puts it back, so the tool can send the event again.
	live.ended = ev.Final
	if ev.Final {
		if err := t.store.DeleteToolSubscription(ts.Key); err != nil {
			live.ended = false
			t.events.WithLabelValues(eventFailed).Inc()
			return nil, protocol.Errorf(protocol.ErrInternal, "end tool subscription with its final event: %v", err)
		}
		t.forget(ts)
	}
	answer, err := t.publish(live, ts.Topic, ev)
	if err != nil {
		if ev.Final {
			t.restore(ts, live)
		}
		t.events.WithLabelValues(eventFailed).Inc()
		return nil, err
	}
	if ev.Final {
		t.s.Options().Logger.Info("tool subscription ended by its final event", "group_id", ts.GroupID, "tool_call_id", ts.ToolCallID)
	}
	t.events.WithLabelValues(answer.Status).Inc()
	return answer, nil
}

// lookup returns the active subscription of callback id, nil when none.
func (t *subscriptions) lookup(id string) (*store.ToolSubscription, error) {
	if id == "" {
		return nil, nil
	}
	return t.store.GetToolSubscription(callbackKey(id))
}

// publish publishes ev on topic as live's owner, through its publisher
// (bus.Server.Publish): the owner's rate and caps apply, and a topic
// with nobody to take the event now (no subscriber, no fallback, not
// held) means its thread is gone: the event is logged and discarded
// (orphaned). With subscribers the answer comes once the message is
// accepted; its walk goes on, retried or dead-lettered as any
// message's.
func (t *subscriptions) publish(live *liveSub, topic string, ev *protocol.SubscriptionEvent) (*eventAnswer, error) {
	params, err := json.Marshal(struct {
		Topic   string                      `json:"topic"`
		Payload *protocol.SubscriptionEvent `json:"payload"`
	}{topic, ev})
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInternal, "encode event: %v", err)
	}
	pubd, err := t.s.Publish(context.Background(), live.pub, params, &bus.PublishOptions{Remote: live.remote})
	if err != nil {
		return nil, err
	}
	if pubd.Result != nil && pubd.Result.NoSubscribers() {
		t.s.Options().Logger.Warn("tool event orphaned: its thread's topic has nobody to take it; discarded", "group_id", ev.GroupID, "tool_call_id", ev.ToolCallID, "topic", topic)
		return &eventAnswer{Status: eventOrphaned}, nil
	}
	return &eventAnswer{Status: eventDelivered, MessageID: pubd.MessageID}, nil
}
