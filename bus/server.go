package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/keylock"
	"github.com/bub-bus/bub/internal/outbound"
	"github.com/bub-bus/bub/protocol"
)

// Options configure a Server. The zero value of each field means its
// default.
type Options struct {
	// ServerID is reported in initialize results and is the from of the
	// bus's events; no peer may take it, or any id starting with "bub-",
	// as its clientId. Default: "bub-" and random hex; in a cluster,
	// "bub-" and the cluster's name, the same on every node.
	ServerID string
	// DefaultPolicy applies to subscriptions that name none. Default:
	// stopPropagationOnProcessed.
	DefaultPolicy protocol.Policy
	// DeliveryTimeout bounds one processMessage call. Default: 30s.
	DeliveryTimeout time.Duration
	// MaxMessageBytes is the largest WebSocket message accepted; a larger
	// one closes the connection with status 1009. Default: 1 MiB.
	MaxMessageBytes int64
	// WriteTimeout bounds the write of one message to a peer; a peer that
	// does not read within it is disconnected, so it never holds up
	// others. Default: 10s.
	WriteTimeout time.Duration
	// PingInterval is how often the bus sends a WebSocket ping; a peer
	// that does not answer within the interval is disconnected.
	// Default: 30s.
	PingInterval time.Duration
	// MaxInFlight bounds the requests one connection may have running at
	// once; beyond it a request is refused at once with -32006.
	// Default: 256.
	MaxInFlight int
	// OriginPatterns lists the browser origins allowed to connect, as
	// host patterns (see websocket.AcceptOptions). Clients that send no
	// Origin header, as non-browser clients do, are always allowed.
	OriginPatterns []string
	// Store keeps pending retries, held messages, the dead-letter
	// queue, idempotency records and durable subscriptions of a single
	// node. The caller opens and closes it. Default: an in-memory store,
	// which loses all of that when the process ends; fine for tests and
	// embedding, never what bub serve uses.
	Store *store.Store
	// MaxAttempts is how many delivery attempts a message gets per
	// subscriber before it is dead-lettered. Default: 5.
	MaxAttempts int
	// RetryBaseDelay is the first retry's delay when the subscriber
	// gives no retry_seconds; it doubles per attempt, with jitter.
	// Default: 1s.
	RetryBaseDelay time.Duration
	// RetryDelayCap caps every retry delay, retry_seconds included.
	// Default: 5m.
	RetryDelayCap time.Duration
	// HoldPatterns are the topics whose messages are held when nobody
	// subscribes, until a subscriber appears or HoldLifetime ends.
	// Default: agent:*.
	HoldPatterns []string
	// HoldLifetime is how long a held message waits for a subscriber,
	// measured from its first routing (its publish, or its replay), and
	// kept across restarts; then it is dead-lettered with reason
	// no_subscribers. A message a fallback asked to route again later
	// waits as long. It is not the retry schedule: a hold does not
	// use up MaxAttempts. Default: 1h.
	HoldLifetime time.Duration
	// Logger receives structured logs. Default: slog.Default().
	Logger *slog.Logger

	// Auth checks credentials and permissions (docs/SECURITY.md). Nil
	// means an open bus: any peer may be any clientId and do anything
	// but publish to the bus's own topics. SetAuth replaces it at run
	// time.
	Auth *auth.Authenticator
	// IdempotencyWindow is how long an idempotency key of a publish
	// (HTTP Idempotency-Key) is kept:
	// a repeat within it gets the first answer. Default: 24 h.
	IdempotencyWindow time.Duration
	// Hosts are the Host header values a WebSocket upgrade may carry
	// besides the address the bus listens on, so that a web page cannot
	// reach a loopback bus through DNS rebinding.
	Hosts []string

	Limits Limits

	// Extensions are the add-ons the server starts with, in order
	// (extend.go).
	Extensions []Extension

	// Cluster makes the bus one node of a cluster (docs/CLUSTER.md):
	// the subscription order, deliveries to subscribers on other nodes,
	// client ownership, retries, holds and the dead-letter queue go
	// through it; cluster.ForBus gives one on NATS JetStream. Store must
	// then be nil: the cluster gives the store. Nil: one node on its own.
	Cluster Cluster

	// viaPipeline makes every delivery of a walk go through the delivery
	// pipeline on a goroutine of its own, as one that may wait does
	// (walk.go), so that tests hold both ways of making a delivery to
	// the same behaviour (export_test.go).
	viaPipeline bool
}

// Limits bound what peers can make the bus hold. The zero value of each
// field means its default; a negative value means no limit.
type Limits struct {
	// MaxConnections bounds the connections in all. Default: 10000.
	MaxConnections int
	// MaxConnectionsPerAddr bounds the connections from one remote IP
	// address. Default: 256.
	MaxConnectionsPerAddr int
	// HandshakeTimeout is how long a connection has to initialize.
	// Default: 10s.
	HandshakeTimeout time.Duration
	// MaxSubscriptions bounds the subscriptions of one connection.
	// Default: 1000.
	MaxSubscriptions int
	// MaxTopicBytes bounds topics and patterns; at most
	// protocol.MaxTopicBytes. Default: protocol.MaxTopicBytes.
	MaxTopicBytes int
	// MaxPatternWildcards bounds the wildcards (* and ?) and classes in
	// one pattern, so that no subscription makes routing slow.
	// Default: 8.
	MaxPatternWildcards int
	// MaxPending bounds the stored retries and held messages in all.
	// Default: 100000.
	MaxPending int
	// MaxPendingPerIdentity bounds those counting against one identity
	// (the clientId when no auth is configured): the messages it
	// published that are held, and the retries waiting on it as a
	// subscriber. An identity's grant may set its own. Default: 10000.
	MaxPendingPerIdentity int
	// MaxStoredBytes bounds the bytes of the stored retries and held
	// messages in all, as the store holds them (payload included).
	// Default: 1 GiB.
	MaxStoredBytes int
	// MaxStoredBytesPerIdentity bounds those counting against one
	// identity, as MaxPendingPerIdentity counts, with the identity's
	// idempotency records (idempotency.go). Default: 64 MiB.
	MaxStoredBytesPerIdentity int
	// MaxDeadLetters bounds the entries of the dead-letter queue; at
	// the bound, or at MaxDeadLetterBytes, a message due to be
	// dead-lettered stays pending instead (docs/OPERATIONS.md,
	// "Dead-letter queue full"). Default: 100000.
	MaxDeadLetters int
	// MaxDeadLetterBytes bounds the bytes of the dead-letter queue.
	// Default: 1 GiB.
	MaxDeadLetterBytes int
	// MaxReplayIDs bounds the ids one dlq.replay takes. Default: 1000.
	MaxReplayIDs int
	// SlowSubscriberTimeouts is how many consecutive delivery timeouts
	// make the bus stop waiting on a subscriber: its deliveries then
	// fail at once, as for a subscriber that went away, until it answers
	// one or reconnects. Default: 3.
	SlowSubscriberTimeouts int
	// PublishRate limits each identity's publishes, by every door (one
	// token bucket shared by its connections and HTTP publishers; per
	// clientId on an open bus); an identity's grant may set its own.
	// Default: none.
	PublishRate float64
	// PublishBurst is the bucket's size. Default: max(1, PublishRate).
	PublishBurst int
	// MaxDurablePerIdentity bounds the durable subscriptions of one
	// identity (the clientId when no auth is configured), across its
	// clientIds. Default: 100.
	MaxDurablePerIdentity int
	// MaxIdempotencyKeysPerIdentity bounds the idempotency keys one
	// identity holds within Options.IdempotencyWindow, whatever door its
	// publishes came through; a publish with a new key beyond it is
	// refused (-32011, with retry_after_ms until the oldest expires).
	// Default: 10000.
	MaxIdempotencyKeysPerIdentity int
	// MaxConnectionsPerIdentity bounds the WebSocket connections one
	// authenticated identity holds initialized, across its clientIds
	// and addresses. Default: 1000.
	MaxConnectionsPerIdentity int
	// MaxStreamsPerIdentity bounds the journal's SSE streams one
	// identity holds open. Default: 64.
	MaxStreamsPerIdentity int
	// MaxHTTPPublishersPerIdentity bounds the clientIds one identity
	// publishes as over HTTP that the bus keeps (each with its order and
	// rate); beyond it the identity's least recently used is forgotten.
	// Default: 256.
	MaxHTTPPublishersPerIdentity int
}

func (o *Options) setDefaults() {
	if o.ServerID == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		o.ServerID = serverIDPrefix + hex.EncodeToString(b)
	}
	if o.DefaultPolicy == "" {
		o.DefaultPolicy = protocol.PolicyStopOnProcessed
	}
	if o.DeliveryTimeout <= 0 {
		o.DeliveryTimeout = 30 * time.Second
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 1 << 20
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.PingInterval <= 0 {
		o.PingInterval = 30 * time.Second
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 256
	}
	if o.IdempotencyWindow <= 0 {
		o.IdempotencyWindow = 24 * time.Hour
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.RetryBaseDelay <= 0 {
		o.RetryBaseDelay = time.Second
	}
	if o.RetryDelayCap <= 0 {
		o.RetryDelayCap = 5 * time.Minute
	}
	if o.HoldLifetime <= 0 {
		o.HoldLifetime = time.Hour
	}
	if o.HoldPatterns == nil {
		o.HoldPatterns = []string{"agent:*"}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Server is the bus. It serves WebSocket peers at "/" and /healthz,
// /readyz and /metrics over HTTP; mount it as an http.Handler.
type Server struct {
	opts    Options
	log     *slog.Logger
	router  *router
	metrics *metrics
	// pipe is the delivery pipeline (delivery.go).
	pipe *pipeline
	// store and keys are what the cluster's Join gave (a single node's
	// own included): keys reserves idempotency keys (idempotency.go).
	store Store
	keys  IdempotencyReserver
	// keyLocks serialize the requests of one idempotency key
	// (idempotency.go).
	keyLocks keylock.Locks
	// funcSubs are the subscribers added with Subscribe, by clientId,
	// under funcMu (subscriber_func.go).
	funcMu   sync.Mutex
	funcSubs map[string]*funcSubscriber

	sched        *scheduler
	pinger       *pinger
	events       *events
	holdPatterns []*protocol.Pattern
	// auth is the Authenticator in force; nil: an open bus.
	auth       atomic.Pointer[auth.Authenticator]
	limitState *limitState
	// durables are the durable subscriptions (durable_sub.go).
	durables *durables

	// ctx is the lifetime of accepted work: publishing outlives the
	// publisher's connection, but not the Server.
	ctx    context.Context
	cancel context.CancelFunc

	messageSeq atomic.Uint64
	bootID     string
	// connSeq numbers connections (conn.cid).
	connSeq atomic.Uint64
	// cl is the bus's side of its cluster, a single node's own included.
	cl *clusterState

	// draining is set once, under mu, when Shutdown starts.
	draining atomic.Bool
	// requests counts running queued requests (sendMessage, dlq.*) until
	// their answers are written; Add only under mu while not draining, so
	// Shutdown's Wait never races an Add.
	requests sync.WaitGroup
	// work counts connection goroutines.
	work sync.WaitGroup

	// mu guards clients and conns, and orders the draining flag against
	// requests.Add and conn registration. Lock order: bus/doc.go.
	mu      sync.Mutex
	clients map[string]*conn // by clientId, initialized connections only
	conns   map[*conn]struct{}

	// What the add-ons registered as the server started (extend.go):
	// mux serves the HTTP paths that are not the core's, methods are the
	// JSON-RPC methods served (the core's, then the add-ons'),
	// observers hear events, shutdownHooks run as Shutdown starts;
	// callbacks takes what peers send to callback topics (doors.go);
	// publishHooks and the pipeline's middleware are on the messages'
	// path (middleware.go), intercepted when there is any: the read
	// loops then leave publishing and delivering to the pipeline.
	// extending is set while Extend runs, the only time the add-ons may
	// register (mustExtend).
	extending     bool
	mux           *http.ServeMux
	methods       map[string]method
	observers     observers
	shutdownHooks []func(context.Context)
	callbacks     CallbackFunc
	publishHooks  []PublishHook
	intercepted   bool
	// surveys are the SurveyHandlers of the operations this node
	// answers, by name (survey.go): a sync.Map, as the cluster may ask
	// before the add-ons registered them (they extend the server after
	// it joined).
	surveys sync.Map
}

// New returns a Server with the given options (nil means all defaults)
// and resumes the pending retries and holds its store holds.
func New(opts *Options) (*Server, error) { return NewContext(context.Background(), opts) }

// NewContext is New with ctx bounding the start: a cluster node waits
// for a majority of its nodes to join (Options.Cluster), for up to its
// StartTimeout, and gives up as soon as ctx ends.
func NewContext(ctx context.Context, opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.setDefaults()
	if o.Cluster != nil && opts.ServerID == "" {
		// A cluster is one bus: every node reports the same serverId, and
		// the events any node publishes come from it, so a peer that
		// trusts only its bus's events (the spawner) trusts every node's.
		name, _ := o.Cluster.Names()
		o.ServerID = serverIDPrefix + name
	}
	if o.Cluster != nil && o.Store != nil {
		return nil, errors.New("new bus: Store and Cluster exclude each other: a cluster keeps its state in JetStream")
	}
	if !o.DefaultPolicy.Valid() {
		return nil, fmt.Errorf("new bus: unknown default policy %q (want one of %v)", o.DefaultPolicy, protocol.Policies)
	}
	var holds []*protocol.Pattern
	for _, h := range o.HoldPatterns {
		p, err := protocol.ParsePattern(h)
		if err != nil {
			return nil, fmt.Errorf("new bus: hold pattern: %w", err)
		}
		holds = append(holds, p)
	}
	boot := make([]byte, 6)
	_, _ = rand.Read(boot)
	s := &Server{
		opts:    o,
		log:     o.Logger,
		router:  newRouter(),
		metrics: newMetrics(),
		clients: make(map[string]*conn),
		conns:   make(map[*conn]struct{}),
		bootID:  hex.EncodeToString(boot),
		mux:     http.NewServeMux(),
		methods: make(map[string]method, len(methods)),

		holdPatterns: holds,
	}
	for name, m := range methods {
		s.methods[name] = m
	}
	s.auth.Store(o.Auth)
	s.limitState = newLimitState(o.Limits, s.metrics.registry, s.log)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.events = newEvents(s)
	s.pipe = newPipeline(o.DeliveryTimeout, s.metrics, &s.observers, s.limitState.skipSlow(), s.events.track())
	s.sched = newScheduler(s)
	s.durables = newDurables(s)
	s.pinger = newPinger(o.PingInterval)
	cl := o.Cluster
	if cl == nil {
		st := o.Store
		if st == nil {
			st = store.OpenMemory()
		}
		cl = &singleNode{store: st}
		s.durables.local = st
	}
	if err := s.joinCluster(ctx, cl); err != nil {
		s.cancel()
		name, node := cl.Names()
		return nil, fmt.Errorf("new bus: join cluster %q as node %q: %w", name, node, err)
	}
	fail := func(err error) (*Server, error) {
		// What the add-ons started ends with the start that failed.
		for _, f := range s.shutdownHooks {
			f(context.Background())
		}
		s.cancel()
		_ = s.cl.cluster.Leave(context.Background())
		return nil, err
	}
	if err := s.extend(); err != nil {
		return fail(fmt.Errorf("new bus: %w", err))
	}
	// The pending caps count what the store holds; counting now spares
	// the first publish the scan.
	if _, _, err := s.store.PendingUsage(""); err != nil {
		return fail(fmt.Errorf("new bus: count pending work: %w", err))
	}
	if err := s.durables.restore(ctx); err != nil {
		return fail(fmt.Errorf("new bus: restore durable subscriptions: %w", err))
	}
	pending, err := s.store.PendingSchedule()
	if err != nil {
		return fail(fmt.Errorf("new bus: resume pending work: %w", err))
	}
	for _, p := range pending {
		s.sched.resume(p)
	}
	if len(pending) > 0 {
		o.Logger.Info("resuming pending work", "pending", len(pending))
	}
	s.metrics.watchStore(s.store)
	s.work.Add(2)
	go func() {
		defer s.work.Done()
		s.sched.run(s.ctx)
	}()
	go func() {
		defer s.work.Done()
		s.pinger.run()
	}()
	return s, nil
}

// Registry returns the Prometheus registry holding the bus's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.registry }

// ServeHTTP upgrades WebSocket requests to bus peers and serves the
// health and metrics endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		fmt.Fprintln(w, "ok")
	case "/readyz":
		if s.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		if err := s.cl.cluster.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	case "/metrics":
		promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	case "/":
		s.serveWebSocket(w, r)
	default:
		s.mux.ServeHTTP(w, r)
	}
}

func (s *Server) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		http.Error(w, "bus is shutting down", http.StatusServiceUnavailable)
		return
	}
	if r.Header.Get("Upgrade") == "" {
		fmt.Fprintln(w, "bub-bus: connect with a WebSocket client and speak JSON-RPC 2.0; see docs/PROTOCOL.md")
		return
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		// Closing, not reading: net/http reads a body the handler left,
		// and one announced and never sent would hold the connection.
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		http.Error(w, refuseUpgradeBody, http.StatusBadRequest)
		return
	}
	release, ok := s.limitState.admitConnection(w, r)
	if !ok {
		return
	}
	handedOff := false
	defer func() {
		if !handedOff {
			release()
		}
	}()
	cred, ok := s.checkUpgrade(w, r)
	if !ok {
		return
	}
	ws, out, err := outbound.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.opts.OriginPatterns}, s.opts.WriteTimeout)
	if err != nil {
		s.log.Warn("websocket upgrade failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	c := s.newConn(ws, out, r.RemoteAddr)
	c.cred = cred
	// Checking draining, counting the connection and registering it for
	// Shutdown happen as one step, so no connection slips past a
	// Shutdown that started during its handshake.
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		_ = ws.Close(websocket.StatusGoingAway, closeShutdown)
		return
	}
	s.work.Add(1)
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	// The connection runs on a goroutine of its own and the handler
	// returns, so net/http's connection state (its 4 KiB + 4 KiB bufio
	// buffers, the request, the handler's deep stack) is freed instead of
	// pinned for the connection's life: half of an idle connection's
	// memory (docs/BENCHMARKS.md, "Idle connection memory").
	handedOff = true
	go func() {
		c.startHandshakeTimer()
		c.serve(func() {
			c.stopHandshakeTimer()
			c.forgetSlow()
			release()
			s.work.Done()
		})
	}()
}

// Shutdown drains the bus: /readyz answers 503, new connections and new
// messages are refused, running deliveries and retry attempts get until
// ctx ends to finish, what is pending stays in the store for the next
// start, then every peer is closed with status 1001 (going away). The
// caller shuts down the http.Server that serves s and closes the store.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining.Store(true)
	s.mu.Unlock()
	for _, f := range s.shutdownHooks {
		f(ctx)
	}
	done := make(chan struct{})
	go func() {
		s.requests.Wait()
		s.sched.stop()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("drain: %w", ctx.Err())
	}
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.events.stop()
	s.pinger.close()
	s.limitState.refusedConns.Stop()
	for _, c := range conns {
		c.close(websocket.StatusGoingAway, closeShutdown)
	}
	closed := make(chan struct{})
	go func() {
		s.work.Wait()
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		// Peers that do not finish the close handshake in time are cut.
		if err == nil {
			err = fmt.Errorf("close peers: %w", ctx.Err())
		}
		for _, c := range conns {
			_ = c.stream.Close()
		}
	}
	s.cancel()
	<-closed
	// Retry attempts still running fail fast now that the peers are gone;
	// wait for them to settle in the store before the caller closes it.
	s.sched.stop()
	if lerr := s.cl.leaveCluster(); lerr != nil && err == nil {
		err = lerr
	}
	return err
}

// beginRequest registers a running queued request, or refuses it while
// draining.
func (s *Server) beginRequest() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return protocol.ErrShuttingDown
	}
	s.requests.Add(1)
	return nil
}
