package bus

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// Tool subscriptions (seed rap-subscription-events.md; docs/PROTOCOL.md,
// "Tool subscriptions"): an agent records one with
// toolSubscriptions.start and gets a callback, an unguessable id served
// at /v1/callbacks/{id} and as the topic callback:{id}; each event a tool
// posts there is checked against the subscription and published on its
// topic as a message from the agent, so that a hibernated agent is woken
// by the spawner's fallback subscription as by any message. The store is
// the record of the active subscriptions; this file keeps an index of it
// by thread, and each subscription's rate bucket and order.

// Defaults of the tool subscription limits (Options).
const (
	defaultMaxToolSubscriptionsPerThread = 16
	defaultMaxToolSubscriptions          = 100_000
	defaultToolEventRate                 = 10
	defaultToolEventBurst                = 20
)

// callbackIDBytes is the randomness of a callback id: 192 bits, as
// unguessable as a token.
const callbackIDBytes = 24

// Outcomes of bub_tool_events_total.
const (
	toolEventDelivered   = "delivered"
	toolEventOrphaned    = "orphaned"
	toolEventUnknown     = "unknown"
	toolEventMalformed   = "malformed"
	toolEventMismatch    = "mismatch"
	toolEventRateLimited = "rate_limited"
	toolEventFailed      = "failed"
)

// toolSubStore is a Store that keeps tool subscriptions.
type toolSubStore interface {
	PutToolSubscription(ts *store.ToolSubscription) error
	DeleteToolSubscription(key string) error
	GetToolSubscription(key string) (*store.ToolSubscription, error)
	ToolSubscriptions() ([]*store.ToolSubscription, error)
}

var _ toolSubStore = (*store.Store)(nil)

// toolSubWatcher is a toolSubStore the other nodes of a cluster write to
// as well: the index follows it, each node's changes included.
// WatchToolSubscriptions applies every subscription held before it
// returns, then each change, ts nil for a removal of key.
type toolSubWatcher interface {
	WatchToolSubscriptions(ctx context.Context, apply func(key string, ts *store.ToolSubscription)) error
}

// toolSubscriptions is the bus's side of the tool subscriptions.
type toolSubscriptions struct {
	s     *Server
	store toolSubStore // nil: refused (a store that cannot keep them)

	mu sync.Mutex
	// threads indexes the store: group_id → tool_call_id → key; byKey
	// holds each indexed subscription.
	threads map[string]map[string]string
	byKey   map[string]*store.ToolSubscription
	// live holds each subscription's rate bucket, order and publisher.
	live map[string]*liveToolSub

	events *prometheus.CounterVec
}

// liveToolSub is what the bus keeps in memory for one subscription.
type liveToolSub struct {
	// order makes one event of the subscription at a time go through,
	// so they reach the topic in the order the tool posted them and a
	// final one is the last.
	order   sync.Mutex
	ended   bool // cancelled or final: no event goes through
	limiter *rate.Limiter
	// pub publishes its events as the owner: one stand-in connection,
	// whose tickets keep the events' order at each subscriber.
	pub *Publisher
}

// newToolSubscriptions loads the index from st (nil: the bus keeps
// none), and follows it if other nodes write to it (toolSubWatcher),
// and registers the metrics. ctx bounds the load.
func newToolSubscriptions(ctx context.Context, s *Server, st toolSubStore) (*toolSubscriptions, error) {
	t := &toolSubscriptions{s: s, store: st, threads: map[string]map[string]string{}, byKey: map[string]*store.ToolSubscription{}, live: map[string]*liveToolSub{}}
	if w, ok := st.(toolSubWatcher); ok {
		err := w.WatchToolSubscriptions(ctx, func(key string, ts *store.ToolSubscription) {
			t.mu.Lock()
			defer t.mu.Unlock()
			if ts == nil {
				t.unindexLocked(key)
				return
			}
			t.indexLocked(ts)
		})
		if err != nil {
			return nil, fmt.Errorf("watch tool subscriptions: %w", err)
		}
	} else if st != nil {
		all, err := st.ToolSubscriptions()
		if err != nil {
			return nil, fmt.Errorf("load tool subscriptions: %w", err)
		}
		for _, ts := range all {
			t.indexLocked(ts)
		}
	}
	t.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_tool_events_total", Help: "Tool subscription events posted to a callback, by outcome (delivered, orphaned, unknown, malformed, mismatch, rate_limited, failed).",
	}, []string{"outcome"})
	for _, o := range []string{toolEventDelivered, toolEventOrphaned, toolEventUnknown, toolEventMalformed, toolEventMismatch, toolEventRateLimited, toolEventFailed} {
		t.events.WithLabelValues(o)
	}
	s.metrics.registry.MustRegister(t.events, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bub_tool_subscriptions", Help: "Active tool subscriptions.",
	}, func() float64 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return float64(len(t.byKey))
	}))
	return t, nil
}

// indexLocked adds ts to the index, in place of another subscription of
// its tool call. Adding one twice (a node's own change, which its watch
// brings back) changes nothing. The caller holds t.mu.
func (t *toolSubscriptions) indexLocked(ts *store.ToolSubscription) {
	calls := t.threads[ts.GroupID]
	if calls == nil {
		calls = map[string]string{}
		t.threads[ts.GroupID] = calls
	}
	if old, ok := calls[ts.ToolCallID]; ok && old != ts.Key {
		delete(t.byKey, old)
	}
	calls[ts.ToolCallID] = ts.Key
	t.byKey[ts.Key] = ts
}

// unindexLocked removes the subscription with key from the index, if it
// is there. The caller holds t.mu.
func (t *toolSubscriptions) unindexLocked(key string) {
	ts := t.byKey[key]
	if ts == nil {
		return
	}
	delete(t.byKey, key)
	delete(t.live, key)
	calls := t.threads[ts.GroupID]
	if calls[ts.ToolCallID] == key {
		delete(calls, ts.ToolCallID)
	}
	if len(calls) == 0 {
		delete(t.threads, ts.GroupID)
	}
}

// callbackKey is the key a callback id is stored and indexed under.
func callbackKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// checkToolSubIDs checks a group_id and a tool_call_id given to a method.
func checkToolSubIDs(groupID, toolCallID string) error {
	for _, f := range []struct{ name, v string }{{"group_id", groupID}, {"tool_call_id", toolCallID}} {
		if f.v == "" {
			return protocol.Errorf(protocol.ErrInvalidParams, "%s is required", f.name)
		}
		if len(f.v) > protocol.MaxToolSubscriptionIDBytes {
			return protocol.Errorf(protocol.ErrInvalidParams, "%s is longer than %d bytes", f.name, protocol.MaxToolSubscriptionIDBytes)
		}
	}
	return nil
}

// refuseUnkept is the error of a method when the bus's store keeps no
// tool subscriptions (an embedder's Store may not).
func refuseUnkept() error {
	return protocol.Errorf(protocol.ErrInvalidParams, "this bus keeps no tool subscriptions: its store cannot")
}

// startToolSubscription serves toolSubscriptions.start.
func (c *conn) startToolSubscription(req *rpcstream.Request) (any, error) {
	var p protocol.ToolSubscriptionStartParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if err := checkToolSubIDs(p.GroupID, p.ToolCallID); err != nil {
		return nil, err
	}
	c.mu.Lock()
	access, identity, owner, limitKey := c.access, c.identity, c.clientID, c.limitKeyLocked()
	c.mu.Unlock()
	for _, f := range []struct{ name, topic string }{{"topic", p.Topic}, {"tool", p.Tool}} {
		if f.topic == "" && f.name == "tool" {
			continue
		}
		if err := protocol.ValidateTopic(f.topic); err != nil {
			return nil, protocol.Errorf(protocol.ErrInvalidParams, "%s: %v", f.name, err)
		}
		if len(f.topic) >= len(protocol.CallbackTopicPrefix) && f.topic[:len(protocol.CallbackTopicPrefix)] == protocol.CallbackTopicPrefix {
			return nil, protocol.Errorf(protocol.ErrInvalidParams, "%s: %q is a callback topic", f.name, f.topic)
		}
		// The events are published, and the cancel notified, as the
		// caller: it must be allowed to publish there.
		if err := c.checkPublish(access, identity, owner, f.topic); err != nil {
			return nil, err
		}
	}
	t := c.server.toolSubs
	if t.store == nil {
		return nil, refuseUnkept()
	}
	idBytes := make([]byte, callbackIDBytes)
	_, _ = rand.Read(idBytes)
	id := base64.RawURLEncoding.EncodeToString(idBytes)
	ts := &store.ToolSubscription{
		Key: callbackKey(id), GroupID: p.GroupID, ToolCallID: p.ToolCallID, Topic: p.Topic, Tool: p.Tool,
		Owner: owner, Identity: limitKey, Created: time.Now().UTC(),
	}
	// The index is taken before the write and given back if it fails,
	// so two starts cannot both pass a limit.
	t.mu.Lock()
	switch {
	case t.threads[p.GroupID][p.ToolCallID] != "":
		t.mu.Unlock()
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "tool call %q already has an active subscription in thread %q", p.ToolCallID, p.GroupID)
	case len(t.threads[p.GroupID]) >= c.server.opts.MaxToolSubscriptionsPerThread:
		t.mu.Unlock()
		return nil, protocol.Errorf(protocol.ErrLimitReached, "thread %q has %d active tool subscriptions, the most it may (--max-tool-subscriptions-per-thread); cancel one first", p.GroupID, c.server.opts.MaxToolSubscriptionsPerThread)
	case len(t.byKey) >= c.server.opts.MaxToolSubscriptions:
		t.mu.Unlock()
		return nil, protocol.Errorf(protocol.ErrLimitReached, "the bus has %d active tool subscriptions, the most it keeps (--max-tool-subscriptions)", len(t.byKey))
	}
	t.indexLocked(ts)
	t.mu.Unlock()
	if err := t.store.PutToolSubscription(ts); err != nil {
		t.mu.Lock()
		t.unindexLocked(ts.Key)
		t.mu.Unlock()
		return nil, protocol.Errorf(protocol.ErrInternal, "record tool subscription: %v", err)
	}
	c.log.Info("tool subscription started", "group_id", ts.GroupID, "tool_call_id", ts.ToolCallID, "topic", ts.Topic, "owner", owner)
	return protocol.ToolSubscriptionStartResult{CallbackPath: protocol.PathCallbacks + id, CallbackTopic: protocol.CallbackTopicPrefix + id}, nil
}

// cancelToolSubscription serves toolSubscriptions.cancel: synchronously,
// the subscription is gone once it answers and no event of it is
// delivered after; its tool is then sent cancel_tool_call, best effort.
func (c *conn) cancelToolSubscription(req *rpcstream.Request) (any, error) {
	var p protocol.ToolSubscriptionCancelParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if err := checkToolSubIDs(p.GroupID, p.ToolCallID); err != nil {
		return nil, err
	}
	t := c.server.toolSubs
	if t.store == nil {
		return nil, refuseUnkept()
	}
	t.mu.Lock()
	key := t.threads[p.GroupID][p.ToolCallID]
	t.mu.Unlock()
	notFound := protocol.Errorf(protocol.ErrNotFound, "thread %q has no active subscription of tool call %q", p.GroupID, p.ToolCallID)
	if key == "" {
		return nil, notFound
	}
	ts, err := t.store.GetToolSubscription(key)
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInternal, "read tool subscription: %v", err)
	}
	if ts == nil {
		return nil, notFound
	}
	if err := c.mayManage(ts, req.Method); err != nil {
		return nil, err
	}
	live := t.liveOf(ts)
	if live == nil {
		return nil, notFound
	}
	live.order.Lock()
	wasEnded := live.ended
	live.ended = true
	if err := t.store.DeleteToolSubscription(key); err != nil {
		live.ended = wasEnded
		live.order.Unlock()
		return nil, protocol.Errorf(protocol.ErrInternal, "remove tool subscription: %v", err)
	}
	t.forget(ts)
	live.order.Unlock()
	c.log.Info("tool subscription cancelled", "group_id", ts.GroupID, "tool_call_id", ts.ToolCallID, "by", c.id())
	return protocol.ToolSubscriptionCancelResult{Cancelled: true, Notified: t.notifyCancel(ts)}, nil
}

// mayManage refuses a caller that neither started ts nor is an admin.
func (c *conn) mayManage(ts *store.ToolSubscription, method string) error {
	if c.id() == ts.Owner {
		return nil
	}
	if err := c.checkAdmin(method); err != nil {
		return err
	}
	if c.server.auth.Load() == nil {
		// On an open bus anyone passes checkAdmin: a thread's
		// subscriptions are still its owner's alone.
		return protocol.Errorf(protocol.ErrForbidden, "tool call %q of thread %q was subscribed by %q; only it, or an admin of a bus with auth, may manage it", ts.ToolCallID, ts.GroupID, ts.Owner)
	}
	return nil
}

// listToolSubscriptions serves toolSubscriptions.list: the caller's own
// subscriptions, every one for an admin of a bus with auth; of one thread
// when group_id is given.
func (c *conn) listToolSubscriptions(req *rpcstream.Request) (any, error) {
	var p protocol.ToolSubscriptionListParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	t := c.server.toolSubs
	if t.store == nil {
		return nil, refuseUnkept()
	}
	all, err := t.store.ToolSubscriptions()
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInternal, "read tool subscriptions: %v", err)
	}
	c.mu.Lock()
	admin := c.server.auth.Load() != nil && (c.access == nil || c.access.Admin())
	c.mu.Unlock()
	me := c.id()
	res := protocol.ToolSubscriptionListResult{Subscriptions: []protocol.ToolSubscription{}}
	for _, ts := range all {
		if (p.GroupID != "" && ts.GroupID != p.GroupID) || (!admin && ts.Owner != me) {
			continue
		}
		res.Subscriptions = append(res.Subscriptions, protocol.ToolSubscription{
			GroupID: ts.GroupID, ToolCallID: ts.ToolCallID, Topic: ts.Topic, Tool: ts.Tool, Owner: ts.Owner, Created: ts.Created,
		})
	}
	return res, nil
}

// liveOf returns ts's live state, made on its first use; nil once ts
// ended (forget), which an event read from the store just before may
// not know yet.
func (t *toolSubscriptions) liveOf(ts *store.ToolSubscription) *liveToolSub {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.threads[ts.GroupID][ts.ToolCallID] != ts.Key {
		return nil
	}
	if l := t.live[ts.Key]; l != nil {
		return l
	}
	s := t.s
	identity := ""
	if ts.Identity != ts.Owner {
		identity = ts.Identity
	}
	pub := s.NewPublisher(ts.Owner, identity, "tool subscription "+ts.GroupID+"/"+ts.ToolCallID, "tool_subscription", ts.GroupID+"/"+ts.ToolCallID)
	l := &liveToolSub{limiter: rate.NewLimiter(rate.Limit(s.opts.ToolEventRate), s.opts.ToolEventBurst), pub: pub}
	t.live[ts.Key] = l
	return l
}

// forget removes an ended subscription from the index and the live
// state. The caller holds its live order.
func (t *toolSubscriptions) forget(ts *store.ToolSubscription) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unindexLocked(ts.Key)
}

// restore puts back a subscription its final event ended, once the
// event could not be published. The caller holds its live order.
func (t *toolSubscriptions) restore(ts *store.ToolSubscription, live *liveToolSub) {
	if err := t.store.PutToolSubscription(ts); err != nil {
		t.s.log.Error("tool subscription ended by a final event that could not be published, and not put back: the tool's next event is refused", "group_id", ts.GroupID, "tool_call_id", ts.ToolCallID, "err", err)
		return
	}
	live.ended = false
	t.mu.Lock()
	defer t.mu.Unlock()
	t.indexLocked(ts)
	t.live[ts.Key] = live
}

// notifyCancel publishes cancel_tool_call to ts's tool, best effort, and
// reports whether anyone subscribes there to take it.
func (t *toolSubscriptions) notifyCancel(ts *store.ToolSubscription) bool {
	if ts.Tool == "" {
		return false
	}
	s := t.s
	payload, _ := json.Marshal(protocol.CancelToolCall{Type: protocol.TypeCancelToolCall, ToolCallID: ts.ToolCallID, ThreadID: ts.GroupID})
	m := &store.Message{Topic: ts.Tool, From: ts.Owner, Publisher: ts.Identity, Payload: payload}
	chain := s.router.route(ts.Tool)
	if len(chain) == 0 {
		return false
	}
	// Not awaited: the cancel is done, whatever the tool answers.
	go func() { _, _ = s.publishRouted(m, chain, nil, false) }()
	return true
}

// toolEventAnswer is the body of a callback's 200.
type toolEventAnswer struct {
	// Status is "delivered" (published on the subscription's topic; a
	// spawner's wake and retries follow) or "orphaned" (its thread has
	// nobody to take it: logged and discarded).
	Status    string `json:"status"`
	MessageID string `json:"messageId,omitempty"`
}

// toolEvent takes one event posted to callback id (by HTTP or on the
// callback topic): body must be a subscription_event of that callback's
// subscription. Errors: -32008 for no active subscription, -32602
// naming the field, -32012 over the subscription's rate, and what the
// publish answers.
func (s *Server) toolEvent(id string, body []byte) (*toolEventAnswer, error) {
	t := s.toolSubs
	ts, err := t.lookup(id)
	if err != nil {
		t.events.WithLabelValues(toolEventFailed).Inc()
		return nil, protocol.Errorf(protocol.ErrInternal, "read tool subscription: %v", err)
	}
	if ts == nil {
		t.events.WithLabelValues(toolEventUnknown).Inc()
		s.log.Info("tool event discarded: no active subscription has its callback (cancelled, final, or never made)")
		return nil, protocol.Errorf(protocol.ErrNotFound, "no active tool subscription has this callback: it was cancelled, ended by a final event, or never made; send no more events")
	}
	if err := rpcstream.CheckUTF8("the event", body); err != nil {
		t.events.WithLabelValues(toolEventMalformed).Inc()
		return nil, err
	}
	ev, err := protocol.ParseSubscriptionEvent(body)
	if err != nil {
		t.events.WithLabelValues(toolEventMalformed).Inc()
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "subscription_event: %v", err)
	}
	switch {
	case ev.GroupID != ts.GroupID:
		t.events.WithLabelValues(toolEventMismatch).Inc()
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "subscription_event: group_id %q is not the thread of this callback's subscription", ev.GroupID)
	case ev.ToolCallID != ts.ToolCallID:
		t.events.WithLabelValues(toolEventMismatch).Inc()
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "subscription_event: tool_call_id %q is not the tool call of this callback's subscription", ev.ToolCallID)
	}
	gone := func() error {
		t.events.WithLabelValues(toolEventUnknown).Inc()
		return protocol.Errorf(protocol.ErrNotFound, "the subscription of this callback was cancelled or ended by a final event; send no more events")
	}
	live := t.liveOf(ts)
	if live == nil {
		return nil, gone()
	}
	if r := live.limiter.Reserve(); r.Delay() > 0 {
		wait := r.Delay()
		r.Cancel()
		t.events.WithLabelValues(toolEventRateLimited).Inc()
		ms := max(1, (wait+time.Millisecond-1)/time.Millisecond)
		return nil, &protocol.Error{
			Code:    protocol.CodeRateLimited,
			Message: fmt.Sprintf("%s: this subscription's events come faster than --tool-event-rate; retry after %d ms", protocol.ErrRateLimited.Message, ms),
			Data:    rateLimitedData{RetryAfterMS: int64(ms)},
		}
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
			t.events.WithLabelValues(toolEventFailed).Inc()
			return nil, protocol.Errorf(protocol.ErrInternal, "end tool subscription with its final event: %v", err)
		}
		t.forget(ts)
	}
	answer, err := t.publish(live.pub, ts, ev)
	if err != nil {
		if ev.Final {
			t.restore(ts, live)
		}
		t.events.WithLabelValues(toolEventFailed).Inc()
		return nil, err
	}
	if ev.Final {
		s.log.Info("tool subscription ended by its final event", "group_id", ts.GroupID, "tool_call_id", ts.ToolCallID)
	}
	t.events.WithLabelValues(answer.Status).Inc()
	return answer, nil
}

// lookup returns the active subscription of callback id, nil when none.
func (t *toolSubscriptions) lookup(id string) (*store.ToolSubscription, error) {
	if t.store == nil || id == "" {
		return nil, nil
	}
	return t.store.GetToolSubscription(callbackKey(id))
}

// publish publishes ev on ts's topic as ts's owner, through pub
// (Publish): the owner's rate and caps apply, and a topic with nobody
// to take the event now (no subscriber, no fallback, not held) means
// its thread is gone: the event is logged and discarded (orphaned). With
// subscribers the answer comes once the message is accepted; its walk
// goes on, retried or dead-lettered as any message's.
func (t *toolSubscriptions) publish(pub *Publisher, ts *store.ToolSubscription, ev *protocol.SubscriptionEvent) (*toolEventAnswer, error) {
	params, err := json.Marshal(struct {
		Topic   string                      `json:"topic"`
		Payload *protocol.SubscriptionEvent `json:"payload"`
	}{ts.Topic, ev})
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInternal, "encode event: %v", err)
	}
	pubd, err := t.s.Publish(context.Background(), pub, params, &PublishOptions{Remote: pub.c.remote})
	if err != nil {
		return nil, err
	}
	if pubd.Result != nil && pubd.Result.NoSubscribers() {
		t.s.log.Warn("tool event orphaned: its thread's topic has nobody to take it; discarded", "group_id", ts.GroupID, "tool_call_id", ts.ToolCallID, "topic", ts.Topic)
		return &toolEventAnswer{Status: toolEventOrphaned}, nil
	}
	return &toolEventAnswer{Status: toolEventDelivered, MessageID: pubd.MessageID}, nil
}

// callbackEvent takes a sendMessage to callback:{id}: a tool that is a
// bus peer posting an event. The answer is sendMessage's result, success
// once the event is accepted.
func (s *Server) callbackEvent(id string, payload []byte) (*protocol.SendMessageResult, error) {
	answer, err := s.toolEvent(id, payload)
	if err != nil {
		return nil, err
	}
	res := &protocol.SendMessageResult{MessageID: answer.MessageID, Success: answer.Status == toolEventDelivered, Acks: []protocol.Ack{}}
	if answer.Status == toolEventOrphaned {
		res.Reason = toolEventOrphaned
	}
	return res, nil
}
