package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// Options are the webhooks of a bus.
type Options struct {
	// Hooks are the incoming webhooks, served at /v1/hooks/{name}
	// (in.go).
	Hooks []Hook
	// Subscriptions are subscriptions whose subscribers are URLs
	// (out.go); a single node's only, for now.
	Subscriptions []Subscription
	// AllowPrivate lets the bus POST deliveries to loopback, private and
	// link-local addresses. Default: refused, so that whoever configures
	// a URL cannot make the bus reach inside its network (SSRF).
	AllowPrivate bool
	// Store keeps the subscriptions webhook.add makes, so that they come
	// back at the next start: the bus's own store. Nil, as on a cluster,
	// whose nodes do not yet share webhook subscriptions: webhook.add and
	// webhook.remove are refused.
	Store *store.Store
}

// An Extension serves a bus's webhooks: add it to
// bus.Options.Extensions.
type Extension struct {
	opts Options
}

var _ bus.Extension = (*Extension)(nil)

// New returns the extension that serves the webhooks of opts.
func New(opts Options) *Extension { return &Extension{opts: opts} }

// webhooks are the webhooks of one Server.
type webhooks struct {
	bus  *bus.Server
	opts Options
	log  *slog.Logger
	// timeout is the bus's delivery timeout, which bounds each call of
	// a URL; maxInFlight bounds the calls to one URL at once, as it
	// does a peer's requests.
	timeout     time.Duration
	maxInFlight int
	// clustered refuses webhook subscriptions: a cluster's nodes do not
	// share them yet.
	clustered bool

	// hooks are the incoming webhooks by name and requests counts their
	// requests (in.go).
	hooks    map[string]*hook
	requests *prometheus.CounterVec
	// client makes the URL subscribers' calls, counted in calls;
	// stopping is set once the bus shuts down, when each call closes
	// the client's idle connections after it (out.go).
	client   *http.Client
	calls    *prometheus.CounterVec
	stopping atomic.Bool

	// mu guards subs, the URL subscribers by clientId. It is taken
	// before the core's locks (Subscribe), never inside them.
	mu   sync.Mutex
	subs map[string]*urlSubscriber
}

// Extend registers the webhooks' doors and methods on s, and puts their
// subscriptions, the configured and the stored, in its router before s
// resumes the pending work that may be theirs.
func (e *Extension) Extend(s *bus.Server) error {
	o := s.Options()
	w := &webhooks{
		bus: s, opts: e.opts, log: o.Logger,
		timeout: o.DeliveryTimeout, maxInFlight: o.MaxInFlight, clustered: o.Cluster != nil,
		subs: make(map[string]*urlSubscriber),
	}
	var err error
	if w.hooks, err = w.newHooks(e.opts.Hooks, o.MaxMessageBytes); err != nil {
		return err
	}
	w.requests, w.calls = newMetrics(s.Registry())
	w.client = newClient(o.DeliveryTimeout, e.opts.AllowPrivate)
	if err := s.Handle(PathHooks, http.HandlerFunc(w.serveHook)); err != nil {
		return err
	}
	for name, serve := range map[string]func(context.Context, *bus.Caller, json.RawMessage) (any, error){
		protocol.MethodWebhookAdd:    w.add,
		protocol.MethodWebhookRemove: w.remove,
		protocol.MethodWebhookList:   w.list,
	} {
		if err := s.HandleMethod(name, bus.Method{Admin: true, Serve: serve}); err != nil {
			return err
		}
	}
	for _, cfg := range e.opts.Subscriptions {
		if _, err := w.subscribe(cfg, true); err != nil {
			return fmt.Errorf("webhook subscription %q: %w", cfg.Name, err)
		}
	}
	if err := w.restore(); err != nil {
		return fmt.Errorf("read webhook subscriptions: %w", err)
	}
	s.OnShutdown(func(context.Context) {
		w.stopping.Store(true)
		w.client.CloseIdleConnections()
	})
	return nil
}

// newMetrics registers the webhooks' counters: requests to the incoming
// ones, calls of the outgoing ones.
func newMetrics(reg prometheus.Registerer) (requests, calls *prometheus.CounterVec) {
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_webhook_requests_total",
		Help: "Requests to /v1/hooks/, by outcome (published, not_found, bad_signature, stale, replay, too_large, bad_request, refused).",
	}, []string{"outcome"})
	calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_webhook_calls_total",
		Help: "POSTs to webhook subscribers' URLs, by outcome (2xx, 3xx, 4xx, 429, 5xx, timeout, error, refused_address).",
	}, []string{"outcome"})
	for vec, values := range map[*prometheus.CounterVec][]string{requests: hookOutcomes, calls: callOutcomes} {
		for _, v := range values {
			vec.WithLabelValues(v)
		}
	}
	reg.MustRegister(requests, calls)
	return requests, calls
}
