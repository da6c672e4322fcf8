package toolsub

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// Defaults of the limits (Options).
const (
	defaultMaxPerThread = 16
	defaultMax          = 100_000
	defaultEventRate    = 10
	defaultEventBurst   = 20
)

// loadTimeout bounds the first load of the index as the bus starts: a
// cluster's store may wait for its bucket's leader, but not forever.
const loadTimeout = time.Minute

// callbackIDBytes is the randomness of a callback id: 192 bits, as
// unguessable as a token.
const callbackIDBytes = 24

// A Store keeps the active tool subscriptions: *store.Store on one
// node, *cluster.Store on a cluster, whose other nodes write to it too.
type Store interface {
	PutToolSubscription(ts *store.ToolSubscription) error
	DeleteToolSubscription(key string) error
	// GetToolSubscription returns the subscription with key, nil when
	// there is none.
	GetToolSubscription(key string) (*store.ToolSubscription, error)
	ToolSubscriptions() ([]*store.ToolSubscription, error)
	// WatchToolSubscriptions applies every subscription held before it
	// returns, then each change another node makes, ts nil for a
	// removal of key, for the store's life: the index follows it. ctx
	// bounds the first load.
	WatchToolSubscriptions(ctx context.Context, apply func(key string, ts *store.ToolSubscription)) error
}

var _ Store = (*store.Store)(nil)

// Options configure tool subscriptions. Zero fields take their
// defaults.
type Options struct {
	// Store keeps the subscriptions (required). On a cluster it is the
	// node's cluster store, which exists once the node joined: build
	// the extension in Extend's time (cmd/bub does).
	Store Store
	// MaxPerThread bounds the active tool subscriptions of one thread
	// (group_id; --max-tool-subscriptions-per-thread). Default: 16.
	MaxPerThread int
	// Max bounds the active tool subscriptions of the bus, each a few
	// hundred bytes of store and memory (--max-tool-subscriptions).
	// Default: 100000.
	Max int
	// EventRate limits the events of each subscription, per second (a
	// token bucket of EventBurst; --tool-event-rate, --tool-event-burst);
	// beyond it a callback answers 429. Default: 10 per second, a burst
	// of 20 or EventRate, the larger.
	EventRate  float64
	EventBurst int
}

// New returns the extension that serves tool subscriptions with opts.
// Each Server it extends gets state of its own.
func New(opts *Options) bus.Extension {
	o := *opts
	if o.MaxPerThread <= 0 {
		o.MaxPerThread = defaultMaxPerThread
	}
	if o.Max <= 0 {
		o.Max = defaultMax
	}
	if o.EventRate <= 0 {
		o.EventRate = defaultEventRate
	}
	if o.EventBurst <= 0 {
		o.EventBurst = max(defaultEventBurst, int(o.EventRate))
	}
	return &extension{opts: o}
}

// extension is the add-on as the bus sees it.
type extension struct {
	opts Options
}

// Extend registers the methods, the callback topics, the callbacks'
// path and the metrics, then loads the index from the store and follows
// it.
func (e *extension) Extend(s *bus.Server) error {
	if e.opts.Store == nil {
		return errors.New("tool subscriptions: no store")
	}
	t := &subscriptions{s: s, opts: e.opts, store: e.opts.Store,
		threads: map[string]map[string]string{}, byKey: map[string]*store.ToolSubscription{}, live: map[string]*liveSub{}}
	for name, serve := range map[string]func(context.Context, *bus.Caller, json.RawMessage) (any, error){
		protocol.MethodToolSubscriptionStart:  t.start,
		protocol.MethodToolSubscriptionCancel: t.cancel,
		protocol.MethodToolSubscriptionList:   t.list,
	} {
		if err := s.HandleMethod(name, bus.Method{Serve: serve}); err != nil {
			return err
		}
	}
	if err := s.HandleCallbacks(t.callbackEvent); err != nil {
		return err
	}
	if err := s.Handle(PathCallbacks, http.HandlerFunc(t.serveCallback)); err != nil {
		return err
	}
	if err := t.registerMetrics(s.Registry()); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	err := t.store.WatchToolSubscriptions(ctx, func(key string, ts *store.ToolSubscription) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if ts == nil {
			t.unindexLocked(key)
			return
		}
		t.indexLocked(ts)
	})
	if err != nil {
		return fmt.Errorf("watch tool subscriptions: %w", err)
	}
	return nil
}

// subscriptions is one bus's side of the tool subscriptions.
type subscriptions struct {
	s     *bus.Server
	opts  Options
	store Store

	mu sync.Mutex
	// threads indexes the store: group_id → tool_call_id → key; byKey
	// holds each indexed subscription.
	threads map[string]map[string]string
	byKey   map[string]*store.ToolSubscription
	// live holds each subscription's rate bucket, order and publisher.
	live map[string]*liveSub

	events *prometheus.CounterVec
}

// liveSub is what the bus keeps in memory for one subscription.
type liveSub struct {
	// order makes one event of the subscription at a time go through,
	// so they reach the topic in the order the tool posted them and a
	// final one is the last.
	order   sync.Mutex
	ended   bool // cancelled or final: no event goes through
	limiter *rate.Limiter
	// pub publishes its events as the owner, in their order at each
	// subscriber.
	pub *bus.Publisher
	// remote names pub in the journal.
	remote string
}

// registerMetrics registers bub_tool_events_total and
// bub_tool_subscriptions with reg.
func (t *subscriptions) registerMetrics(reg prometheus.Registerer) error {
	t.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_tool_events_total", Help: "Tool subscription events posted to a callback, by outcome (delivered, orphaned, unknown, malformed, mismatch, rate_limited, failed).",
	}, []string{"outcome"})
	for _, o := range []string{eventDelivered, eventOrphaned, eventUnknown, eventMalformed, eventMismatch, eventRateLimited, eventFailed} {
		t.events.WithLabelValues(o)
	}
	for _, c := range []prometheus.Collector{t.events, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bub_tool_subscriptions", Help: "Active tool subscriptions.",
	}, func() float64 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return float64(len(t.byKey))
	})} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("tool subscriptions: register metrics: %w", err)
		}
	}
	return nil
}

// indexLocked adds ts to the index, in place of another subscription of
// its tool call. Adding one twice (a node's own change, which its watch
// brings back) changes nothing. The caller holds t.mu.
func (t *subscriptions) indexLocked(ts *store.ToolSubscription) {
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
func (t *subscriptions) unindexLocked(key string) {
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

// checkIDs checks a group_id and a tool_call_id given to a method.
func checkIDs(groupID, toolCallID string) error {
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

// start serves toolSubscriptions.start.
func (t *subscriptions) start(_ context.Context, caller *bus.Caller, params json.RawMessage) (any, error) {
	var p protocol.ToolSubscriptionStartParams
	if err := bus.DecodeParams(protocol.MethodToolSubscriptionStart, params, &p); err != nil {
		return nil, err
	}
	if err := checkIDs(p.GroupID, p.ToolCallID); err != nil {
		return nil, err
	}
	owner, identity := caller.ClientID(), caller.Identity()
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
		if err := caller.CheckPublish(f.topic); err != nil {
			return nil, err
		}
	}
	idBytes := make([]byte, callbackIDBytes)
	_, _ = rand.Read(idBytes)
	id := base64.RawURLEncoding.EncodeToString(idBytes)
	ts := &store.ToolSubscription{
		Key: callbackKey(id), GroupID: p.GroupID, ToolCallID: p.ToolCallID, Topic: p.Topic, Tool: p.Tool,
		Owner: owner, Identity: identity, Created: time.Now().UTC(),
	}
	// The index is taken before the write and given back if it fails,
	// so two starts cannot both pass a limit.
	t.mu.Lock()
	switch {
	case t.threads[p.GroupID][p.ToolCallID] != "":
		t.mu.Unlock()
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "tool call %q already has an active subscription in thread %q", p.ToolCallID, p.GroupID)
	case len(t.threads[p.GroupID]) >= t.opts.MaxPerThread:
		t.mu.Unlock()
		return nil, protocol.Errorf(protocol.ErrLimitReached, "thread %q has %d active tool subscriptions, the most it may (--max-tool-subscriptions-per-thread); cancel one first", p.GroupID, t.opts.MaxPerThread)
	case len(t.byKey) >= t.opts.Max:
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
	caller.Logger().Info("tool subscription started", "group_id", ts.GroupID, "tool_call_id", ts.ToolCallID, "topic", ts.Topic, "owner", owner)
	return protocol.ToolSubscriptionStartResult{CallbackPath: PathCallbacks + id, CallbackTopic: protocol.CallbackTopicPrefix + id}, nil
}

// cancel serves toolSubscriptions.cancel: synchronously, the
// subscription is gone once it answers and no event of it is delivered
// after; its tool is then sent cancel_tool_call, best effort.
func (t *subscriptions) cancel(_ context.Context, caller *bus.Caller, params json.RawMessage) (any, error) {
	const method = protocol.MethodToolSubscriptionCancel
	var p protocol.ToolSubscriptionCancelParams
	if err := bus.DecodeParams(method, params, &p); err != nil {
		return nil, err
	}
	if err := checkIDs(p.GroupID, p.ToolCallID); err != nil {
		return nil, err
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
	if err := mayManage(caller, ts, method); err != nil {
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
	caller.Logger().Info("tool subscription cancelled", "group_id", ts.GroupID, "tool_call_id", ts.ToolCallID, "by", caller.ClientID())
	return protocol.ToolSubscriptionCancelResult{Cancelled: true, Notified: t.notifyCancel(ts)}, nil
}

// mayManage refuses a caller that neither started ts nor is an admin of
// a bus with auth.
func mayManage(caller *bus.Caller, ts *store.ToolSubscription, method string) error {
	if caller.ClientID() == ts.Owner {
		return nil
	}
	if err := caller.CheckAdmin(method); err != nil {
		return err
	}
	if !caller.Admin() {
		// On an open bus anyone passes CheckAdmin: a thread's
		// subscriptions are still its owner's alone.
		return protocol.Errorf(protocol.ErrForbidden, "tool call %q of thread %q was subscribed by %q; only it, or an admin of a bus with auth, may manage it", ts.ToolCallID, ts.GroupID, ts.Owner)
	}
	return nil
}

// list serves toolSubscriptions.list: the caller's own subscriptions,
// every one for an admin of a bus with auth; of one thread when
// group_id is given.
func (t *subscriptions) list(_ context.Context, caller *bus.Caller, params json.RawMessage) (any, error) {
	var p protocol.ToolSubscriptionListParams
	if err := bus.DecodeParams(protocol.MethodToolSubscriptionList, params, &p); err != nil {
		return nil, err
	}
	all, err := t.store.ToolSubscriptions()
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInternal, "read tool subscriptions: %v", err)
	}
	admin, me := caller.Admin(), caller.ClientID()
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
func (t *subscriptions) liveOf(ts *store.ToolSubscription) *liveSub {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.threads[ts.GroupID][ts.ToolCallID] != ts.Key {
		return nil
	}
	if l := t.live[ts.Key]; l != nil {
		return l
	}
	identity := ""
	if ts.Identity != ts.Owner {
		identity = ts.Identity
	}
	remote := "tool subscription " + ts.GroupID + "/" + ts.ToolCallID
	pub := t.s.NewPublisher(ts.Owner, identity, remote, "tool_subscription", ts.GroupID+"/"+ts.ToolCallID)
	l := &liveSub{limiter: rate.NewLimiter(rate.Limit(t.opts.EventRate), t.opts.EventBurst), pub: pub, remote: remote}
	t.live[ts.Key] = l
	return l
}

// forget removes an ended subscription from the index and the live
// state. The caller holds its live order.
func (t *subscriptions) forget(ts *store.ToolSubscription) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unindexLocked(ts.Key)
}

// restore puts back a subscription its final event ended, once the
// event could not be published. The caller holds its live order.
func (t *subscriptions) restore(ts *store.ToolSubscription, live *liveSub) {
	if err := t.store.PutToolSubscription(ts); err != nil {
		t.s.Options().Logger.Error("tool subscription ended by a final event that could not be published, and not put back: the tool's next event is refused", "group_id", ts.GroupID, "tool_call_id", ts.ToolCallID, "err", err)
		return
	}
	live.ended = false
	t.mu.Lock()
	defer t.mu.Unlock()
	t.indexLocked(ts)
	t.live[ts.Key] = live
}

// notifyCancel publishes cancel_tool_call to ts's tool, best effort, and
// reports whether anyone subscribes there to take it. Not awaited: the
// cancel is done, whatever the tool answers.
func (t *subscriptions) notifyCancel(ts *store.ToolSubscription) bool {
	if ts.Tool == "" {
		return false
	}
	payload, _ := json.Marshal(protocol.CancelToolCall{Type: protocol.TypeCancelToolCall, ToolCallID: ts.ToolCallID, ThreadID: ts.GroupID})
	return t.s.PublishBestEffort(&store.Message{Topic: ts.Tool, From: ts.Owner, Publisher: ts.Identity, Payload: payload})
}
