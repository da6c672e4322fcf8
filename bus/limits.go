package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/internal/ratelimit"
	"github.com/bub-bus/bub/internal/slots"
	"github.com/bub-bus/bub/internal/streak"
	"github.com/bub-bus/bub/protocol"
)

// The limits, as named in refusals, logs and the limit label of
// bub_limit_refusals_total: the snake_case config keys of Limits' fields.
const (
	limitConnections        = "max_connections"
	limitConnectionsPerAddr = "max_connections_per_addr"
	limitHandshakeTimeout   = "handshake_timeout"
	limitSubscriptions      = "max_subscriptions"
	limitTopicBytes         = "max_topic_bytes"
	limitPatternWildcards   = "max_pattern_wildcards"
	limitPending            = "max_pending"
	limitPendingPerIdentity = "max_pending_per_identity"
	limitStoredBytes        = "max_stored_bytes"
	limitStoredPerIdentity  = "max_stored_bytes_per_identity"
	limitDeadLetters        = "max_dead_letters"
	limitDeadLetterBytes    = "max_dead_letter_bytes"
	limitReplayIDs          = "max_replay_ids"
	limitSlowSubscriber     = "slow_subscriber_timeouts"
	limitPublishRate        = "publish_rate"
	limitDurablePerIdentity = "max_durable_per_identity"
	limitKeysPerIdentity    = "max_idempotency_keys_per_identity"
	limitConnsPerIdentity   = "max_connections_per_identity"
	limitStreamsPerIdentity = "max_streams_per_identity"
)

// limitNames is the closed label set of bub_limit_refusals_total.
var limitNames = []string{
	limitConnections, limitConnectionsPerAddr, limitHandshakeTimeout, limitSubscriptions,
	limitTopicBytes, limitPatternWildcards, limitPending, limitPendingPerIdentity,
	limitStoredBytes, limitStoredPerIdentity, limitDeadLetters, limitDeadLetterBytes,
	limitReplayIDs, limitSlowSubscriber, limitPublishRate, limitDurablePerIdentity,
	limitKeysPerIdentity, limitConnsPerIdentity, limitStreamsPerIdentity,
}

// closeHandshakeTimeout is the close reason (and closes metric label) of a
// connection that did not initialize in time.
const closeHandshakeTimeout = "no initialize within the handshake deadline"

// failSlowSubscriber is the delivery failure, and deliveries outcome, of a
// delivery not attempted because its subscriber stopped answering.
const failSlowSubscriber = "slow_subscriber"

func (l *Limits) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxConnections, 10000)
	def(&l.MaxConnectionsPerAddr, 256)
	def(&l.MaxSubscriptions, 1000)
	def(&l.MaxPatternWildcards, 8)
	def(&l.MaxPending, 100000)
	def(&l.MaxPendingPerIdentity, 10000)
	def(&l.MaxStoredBytes, 1<<30)
	def(&l.MaxStoredBytesPerIdentity, 64<<20)
	def(&l.MaxDeadLetters, 100000)
	def(&l.MaxDeadLetterBytes, 1<<30)
	def(&l.MaxReplayIDs, 1000)
	def(&l.MaxDurablePerIdentity, 100)
	def(&l.MaxIdempotencyKeysPerIdentity, 10000)
	def(&l.MaxConnectionsPerIdentity, 1000)
	def(&l.MaxStreamsPerIdentity, 64)
	def(&l.MaxHTTPPublishersPerIdentity, 256)
	def(&l.SlowSubscriberTimeouts, 3)
	if l.HandshakeTimeout == 0 {
		l.HandshakeTimeout = 10 * time.Second
	}
	// The protocol's bound holds whatever is configured: a longer topic is
	// refused by ParsePattern and ValidateTopic anyway.
	if l.MaxTopicBytes == 0 || l.MaxTopicBytes > protocol.MaxTopicBytes {
		l.MaxTopicBytes = protocol.MaxTopicBytes
	}
	if l.PublishBurst <= 0 {
		l.PublishBurst = burstFor(l.PublishRate)
	}
}

// burstFor is the default bucket size for a rate: max(1, rate).
func burstFor(r float64) int {
	if r >= math.MaxInt32 {
		return math.MaxInt32
	}
	return max(1, int(math.Ceil(r)))
}

// under reports whether n is below the limit bound; a negative bound is no
// limit.
func under(n, bound int) bool { return bound < 0 || n < bound }

// limitState is the Server's side of the limits: the limits in force,
// swapped whole by SetLimits and read with one atomic load on the hot
// path, the connection counts, and the metrics; and what applies them
// where no connection does: the connection limits (admitConnection),
// the pending and dead-letter caps on the store (pendingFull, retryRoom,
// deadLetterRoom), and the delivery layer that stops waiting on slow
// subscribers (skipSlow).
type limitState struct {
	current atomic.Pointer[Limits]
	log     *slog.Logger
	// store is the one the caps count: the Server's, set once the
	// cluster is joined, before anything is served.
	store Store

	// mu guards the connection counts.
	mu     sync.Mutex
	conns  int
	byAddr map[string]int

	refusals *prometheus.CounterVec
	// refused holds refusals' counter for each limit, resolved once so
	// that counting a refusal allocates nothing.
	refused map[string]prometheus.Counter
	slow    prometheus.Gauge
	// deadLettersFull is 1 while the dead-letter queue is at a cap
	// (deadLetterRoom), for an alert.
	deadLettersFull prometheus.Gauge
	// deadFull is set while it is, so that the log says so once.
	deadFull atomic.Bool
	// buckets are the identities' publish buckets; identityConns and
	// identityStreams count their connections and journal streams
	// (identity_limits.go).
	buckets         ratelimit.Buckets
	identityConns   slots.Slots
	identityStreams slots.Slots

	// refusedConns summarizes refused connections by limit: under a
	// connection flood a line per refusal would flood the log.
	refusedConns *streak.Log
}

// refusedConnsEvery is how often the log counts the connections refused
// under a limit while refusals go on.
const refusedConnsEvery = 10 * time.Second

func newLimitState(l Limits, reg *prometheus.Registry, log *slog.Logger) *limitState {
	st := &limitState{
		log: log,
		refusedConns: streak.New(refusedConnsEvery, func(limit string, sum streak.Summary) {
			log.Warn(fmt.Sprintf("connections refused: limit reached, %d more in the last %v", sum.Events, refusedConnsEvery),
				"limit", limit, "refused", sum.Total, "since", sum.Since)
		}),
		byAddr: make(map[string]int),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_limit_refusals_total", Help: "Work refused, or connections closed, because a limit was reached, by limit.",
		}, []string{"limit"}),
		refused: make(map[string]prometheus.Counter, len(limitNames)),
		slow: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bub_slow_subscribers", Help: "Connections the bus stopped waiting on after slow_subscriber_timeouts consecutive delivery timeouts.",
		}),
		deadLettersFull: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bub_dead_letters_full", Help: "1 while the dead-letter queue is at max_dead_letters or max_dead_letter_bytes, and messages due there stay pending.",
		}),
	}
	for _, name := range limitNames {
		st.refused[name] = st.refusals.WithLabelValues(name)
	}
	openConns := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bub_connections_open", Help: "Connections open now, as the connection limits count them: from accept, WebSocket or not.",
	}, func() float64 {
		st.mu.Lock()
		defer st.mu.Unlock()
		return float64(st.conns)
	})
	reg.MustRegister(st.refusals, st.slow, st.deadLettersFull, openConns)
	l.setDefaults()
	st.current.Store(&l)
	return st
}

// limits returns the limits in force; never modify them.
func (s *Server) limits() *Limits { return s.limitState.current.Load() }

// Limits returns a copy of the limits in force (SetLimits'), with the
// defaults filled in, for an add-on that applies one of them.
func (s *Server) Limits() Limits { return *s.limits() }

// SetLimits replaces the limits in force; connections beyond a new bound
// are not closed, new work is refused.
func (s *Server) SetLimits(l Limits) {
	l.setDefaults()
	s.limitState.current.Store(&l)
	s.log.Info("limits replaced", "max_connections", l.MaxConnections, "max_connections_per_addr", l.MaxConnectionsPerAddr,
		"max_subscriptions", l.MaxSubscriptions, "max_pending", l.MaxPending, "max_pending_per_identity", l.MaxPendingPerIdentity,
		"max_stored_bytes", l.MaxStoredBytes, "max_stored_bytes_per_identity", l.MaxStoredBytesPerIdentity,
		"max_dead_letters", l.MaxDeadLetters, "max_dead_letter_bytes", l.MaxDeadLetterBytes,
		"publish_rate", l.PublishRate, "publish_burst", l.PublishBurst)
}

// limitReached counts a refusal under limit and returns the -32011 error
// naming it.
func (s *Server) limitReached(limit string, format string, args ...any) error {
	s.limitState.refused[limit].Inc()
	return protocol.Errorf(protocol.ErrLimitReached, "%s: %s", limit, fmt.Sprintf(format, args...))
}

// admitConnection counts a WebSocket upgrade against the connection
// limits, unless Listener counted its connection from accept already. It
// returns the release to call when the connection ends, or false after
// answering 503 itself.
func (l *limitState) admitConnection(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	if _, counted := r.Context().Value(countedKey{}).(*countedConn); counted {
		// Closing the connection gives its place back, whoever holds it.
		return func() {}, true
	}
	release, limit, bound := l.admit(l.current.Load(), remoteIP(r.RemoteAddr))
	if release == nil {
		l.refusedConnection(limit, bound, r.RemoteAddr)
		http.Error(w, strings.TrimSuffix(refusalBody(limit, bound), "\n"), http.StatusServiceUnavailable)
		return nil, false
	}
	return release, true
}

// refusedConnection logs a connection refused under limit: the first of
// a run of refusals, then a count every refusedConnsEvery while they go
// on (and bub_limit_refusals_total counts each).
func (l *limitState) refusedConnection(limit string, bound int, remote string) {
	if l.refusedConns.Add(limit) {
		l.log.Warn(fmt.Sprintf("connection refused: limit reached (further refusals are counted every %v while they go on)", refusedConnsEvery),
			"limit", limit, "max", bound, "remote", remote)
	}
}

// remoteIP is the IP address of a request's RemoteAddr, the key of the
// per-address limit: the port differs from one connection to the next.
func remoteIP(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}

// connLimits is a connection's share of the limits.
type connLimits struct {
	// handshake closes the connection if it has not initialized in time;
	// nil when there is no deadline.
	handshake *time.Timer

	// maxPending overrides Limits.MaxPendingPerIdentity for this
	// connection's identity when > 0; rate and rateBurst override
	// PublishRate and PublishBurst when rate > 0. Auth sets them from
	// the credential at initialize, under conn.mu.
	maxPending int
	rate       float64
	rateBurst  int

	// bucket is the publish token bucket of bucketOf, the identity the
	// connection publishes as (identity_limits.go), taken on its first
	// publish under a rate. Guarded by conn.mu.
	bucket   *ratelimit.Bucket
	bucketOf string
	// identitySlot gives back the connection's place under
	// MaxConnectionsPerIdentity; nil when it took none. Guarded by
	// conn.mu.
	identitySlot func()
	// logged has a bit per publish-path limit already logged as reached,
	// so a peer hammering at a limit gets one log line per streak, not
	// one per refusal. Guarded by conn.mu.
	logged uint8

	// timeouts counts consecutive delivery timeouts; slow is set once
	// they reach SlowSubscriberTimeouts, until the peer answers again.
	timeouts atomic.Int32
	slow     atomic.Bool
	// answeredLate is set by the Stream when an answer comes after its
	// call timed out; the next delivery takes it as an answer. (The
	// Stream calls under its lock, so the flag is all it sets.)
	answeredLate atomic.Bool
}

// Bits of connLimits.logged.
const (
	loggedRate = 1 << iota
	loggedPending
)

// startHandshakeTimer closes c with CloseHandshakeTimeout if it has not
// initialized within the handshake deadline.
func (c *conn) startHandshakeTimer() {
	d := c.server.limits().HandshakeTimeout
	if d <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handshake = time.AfterFunc(d, func() {
		c.mu.Lock()
		late := !c.initialized && !c.closed
		c.mu.Unlock()
		if !late {
			return
		}
		c.server.limitState.refused[limitHandshakeTimeout].Inc()
		c.log.Info("closing connection: no initialize in time", "limit", limitHandshakeTimeout, "timeout", d)
		c.close(protocol.CloseHandshakeTimeout, closeHandshakeTimeout)
	})
}

// stopHandshakeTimer stops the handshake deadline: the connection
// initialized or ended.
func (c *conn) stopHandshakeTimer() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handshake != nil {
		c.handshake.Stop()
	}
}

// checkPattern applies the configured pattern rules; a pattern breaking
// one is invalid params, naming the rule and its limit.
func (c *conn) checkPattern(pattern string) error {
	l := c.server.limits()
	if !under(len(pattern)-1, l.MaxTopicBytes) {
		return c.refusePattern("subscribe", limitTopicBytes, l.MaxTopicBytes, "topic pattern is %d bytes, more than %s %d", len(pattern), limitTopicBytes, l.MaxTopicBytes)
	}
	if n := protocol.Wildcards(pattern); !under(n-1, l.MaxPatternWildcards) {
		return c.refusePattern("subscribe", limitPatternWildcards, l.MaxPatternWildcards, "topic pattern %q has %d wildcards and classes, more than %s %d", pattern, n, limitPatternWildcards, l.MaxPatternWildcards)
	}
	return nil
}

// checkTopic applies MaxTopicBytes to a topic published to.
func (c *conn) checkTopic(topic string) error {
	l := c.server.limits()
	if !under(len(topic)-1, l.MaxTopicBytes) {
		return c.refusePattern("sendMessage", limitTopicBytes, l.MaxTopicBytes, "topic is %d bytes, more than %s %d", len(topic), limitTopicBytes, l.MaxTopicBytes)
	}
	return nil
}

// refusePattern counts, logs and returns the -32602 for a topic or pattern
// beyond a configured rule.
func (c *conn) refusePattern(method, limit string, bound int, format string, args ...any) error {
	c.server.limitState.refused[limit].Inc()
	c.log.Info(method+" refused: limit reached", "client", c.id(), "limit", limit, "max", bound)
	return protocol.Errorf(protocol.ErrInvalidParams, format, args...)
}

// checkSubscriptions refuses a subscription beyond MaxSubscriptions; held
// is how many c holds. The caller holds c.mu.
func (c *conn) checkSubscriptions(held int) error {
	bound := c.server.limits().MaxSubscriptions
	if under(held, bound) {
		return nil
	}
	c.log.Info("subscribe refused: limit reached", "client", c.clientID, "limit", limitSubscriptions, "max", bound)
	return c.server.limitReached(limitSubscriptions, "this connection holds %d subscriptions; unsubscribe first", held)
}

// admitPublish applies the publish-path limits to a sendMessage, routed
// on the read loop but not yet delivered or stored, and returns the
// identity the message is published as: the connection's rate, then the
// pending caps on what counts against the identity (the held messages it
// published, the retries waiting on it) and on the bus. The caps are
// checked up front, for every publish, because once a message has been
// delivered to some subscribers the retries the others need must be
// stored, never dropped; so an admitted publish may take the counts a
// little past a cap (by the publishes in flight), and an identity at its
// cap publishes nothing until its pending work drains.
func (c *conn) admitPublish() (identity string, err error) {
	s := c.server
	l := s.limits()
	now := time.Now()
	c.mu.Lock()
	identity = c.limitKeyLocked()
	if wait, ok := c.allowPublishLocked(l, now); !ok {
		first := c.logged&loggedRate == 0
		c.logged |= loggedRate
		c.mu.Unlock()
		s.limitState.refused[limitPublishRate].Inc()
		if first {
			c.log.Info("publishes refused: rate limit reached", "client", c.id(), "identity", identity, "limit", limitPublishRate, "retry_after", wait)
		}
		ms := max(1, (wait+time.Millisecond-1)/time.Millisecond)
		return identity, &protocol.Error{
			Code:    protocol.CodeRateLimited,
			Message: fmt.Sprintf("%s: %s: publishing faster than this identity's rate, shared by its connections; retry after %d ms", protocol.ErrRateLimited.Message, limitPublishRate, ms),
			Data:    protocol.RateLimitedData{RetryAfterMS: int64(ms)},
		}
	}
	perIdentity := c.pendingCapLocked(l)
	c.logged &^= loggedRate
	// Read here so that an accepted publish, the common case, takes the
	// lock once more only when a refusal streak just ended.
	pendingStreak := c.logged&loggedPending != 0
	c.mu.Unlock()

	full, err := s.limitState.pendingFull(l, identity, perIdentity, true)
	if err == nil && full != nil && full.limit == limitStoredPerIdentity && s.pruneKeys(identity) {
		// Expired idempotency records took the room: count again
		// without them.
		full, err = s.limitState.pendingFull(l, identity, perIdentity, true)
	}
	if err != nil {
		return identity, protocol.Errorf(protocol.ErrInternal, "count pending messages: %v", err)
	}
	if full == nil {
		if pendingStreak {
			c.mu.Lock()
			c.logged &^= loggedPending
			c.mu.Unlock()
		}
		return identity, nil
	}
	c.mu.Lock()
	first := c.logged&loggedPending == 0
	c.logged |= loggedPending
	c.mu.Unlock()
	if first {
		c.log.Warn("publishes refused: limit reached", "client", c.id(), "identity", identity, "limit", full.limit, "max", full.bound, "stored", full.n)
	}
	return identity, s.limitReached(full.limit, "%s; try again once they drain", full)
}

// pendingCapLocked is the cap on the entries counting against c's
// identity: its grant's, else the Limits'. The caller holds c.mu.
func (c *conn) pendingCapLocked(l *Limits) int {
	if c.maxPending > 0 {
		return c.maxPending
	}
	return l.MaxPendingPerIdentity
}

// pendingCap is a cap on stored work, with how much it counts (n); a
// negative bound is no cap.
type pendingCap struct {
	limit    string
	n, bound int64
	identity string // "" for a cap on the bus
}

// String says what holds how much, naming the limit, for a refusal.
func (c *pendingCap) String() string {
	what := "retries and held messages"
	if c.limit == limitStoredBytes || c.limit == limitStoredPerIdentity {
		what = "bytes of retries, held messages and idempotency records"
	}
	if c.identity == "" {
		return fmt.Sprintf("the bus holds %d %s, its limit %d", c.n, what, c.bound)
	}
	return fmt.Sprintf("identity %q holds %d %s (held messages it published, retries waiting on it), its limit %d", c.identity, c.n, what, c.bound)
}

// pendingFull returns the first pending cap that stored work has
// reached, for identity (with perIdentity entries its cap) or, if bus is
// set, for the bus; nil when none is.
func (st *limitState) pendingFull(l *Limits, identity string, perIdentity int, bus bool) (*pendingCap, error) {
	caps := []pendingCap{
		{limit: limitPendingPerIdentity, bound: int64(perIdentity), identity: identity},
		{limit: limitStoredPerIdentity, bound: int64(l.MaxStoredBytesPerIdentity), identity: identity},
		{limit: limitPending, bound: int64(l.MaxPending)},
		{limit: limitStoredBytes, bound: int64(l.MaxStoredBytes)},
	}
	if !bus {
		caps = caps[:2]
	}
	if !slices.ContainsFunc(caps, func(c pendingCap) bool { return c.bound >= 0 }) {
		return nil, nil
	}
	total, mine, err := st.store.PendingUsage(identity)
	if err != nil {
		return nil, err
	}
	caps[0].n, caps[1].n = int64(mine.Entries), mine.Bytes
	if bus {
		caps[2].n, caps[3].n = int64(total.Entries), total.Bytes
	}
	for _, c := range caps {
		if c.bound >= 0 && c.n >= c.bound {
			// A copy, so that caps stays on the stack: only a refusal
			// costs an allocation, not every publish.
			full := c
			return &full, nil
		}
	}
	return nil, nil
}

// retryRoom returns the identity of sub, the subscriber a failed
// delivery went to, and whether a retry may be stored against it: not
// when what counts against it has reached its caps, since it is the one
// holding the message up. The delivery is then dead-lettered at once
// (walk), and why says so.
func (st *limitState) retryRoom(sub subscriber) (identity, why string) {
	l := st.current.Load()
	h := sub.held()
	h.mu.Lock()
	identity, perIdentity := h.limitKeyLocked(), sub.pendingCapLocked(l)
	h.mu.Unlock()
	full, err := st.pendingFull(l, identity, perIdentity, false)
	if err != nil || full == nil {
		// A count that fails is the store failing: the retry's own
		// write will say so.
		return identity, ""
	}
	st.refused[full.limit].Inc()
	return identity, fmt.Sprintf("not retried: %s: %s", full.limit, full)
}

// deadLetterRoom reports whether the dead-letter queue is below its caps;
// when it is not, it counts the refusal, raises bub_dead_letters_full and
// logs once until the queue has room again, and returns the limit.
func (st *limitState) deadLetterRoom() (full string) {
	l := st.current.Load()
	if l.MaxDeadLetters < 0 && l.MaxDeadLetterBytes < 0 {
		return ""
	}
	u, err := st.store.DeadLetterUsage()
	switch {
	case err != nil:
		// The dead letter's own write will fail the same way, and say so.
		return ""
	case !under(u.Entries, l.MaxDeadLetters):
		full = limitDeadLetters
	case l.MaxDeadLetterBytes >= 0 && u.Bytes >= int64(l.MaxDeadLetterBytes):
		full = limitDeadLetterBytes
	default:
		if st.deadFull.CompareAndSwap(true, false) {
			st.deadLettersFull.Set(0)
			st.log.Info("dead-letter queue has room again", "dead_letters", u.Entries, "bytes", u.Bytes)
		}
		return ""
	}
	st.refused[full].Inc()
	if st.deadFull.CompareAndSwap(false, true) {
		st.deadLettersFull.Set(1)
		st.log.Error("dead-letter queue full: messages due there stay pending until it has room; replay or purge it (bub dlq)",
			"limit", full, "dead_letters", u.Entries, "bytes", u.Bytes, "max_dead_letters", l.MaxDeadLetters, "max_dead_letter_bytes", l.MaxDeadLetterBytes)
	}
	return full
}

// allowPublishLocked takes a token from the publish bucket of c's
// identity, shared by all its connections and publishers, or says how
// long until one is there. The bucket follows the rate in force: the
// identity's grant's, else the Limits'. The caller holds c.mu.
func (c *conn) allowPublishLocked(l *Limits, now time.Time) (time.Duration, bool) {
	r, burst := c.rate, c.rateBurst
	if r <= 0 {
		r, burst = l.PublishRate, l.PublishBurst
	}
	if r <= 0 {
		return 0, true
	}
	if burst <= 0 {
		burst = burstFor(r)
	}
	if key := c.limitKeyLocked(); c.bucket == nil || c.bucketOf != key {
		c.bucket, c.bucketOf = c.server.limitState.buckets.Of(key), key
	}
	return c.bucket.Allow(now, r, burst)
}

// skipSlow is the delivery layer for SlowSubscriberTimeouts: it counts a
// subscriber's consecutive timeouts, and once they reach the limit fails
// its deliveries at once, as for a subscriber that went away, until it
// answers again (a late answer counts: see noteAnswer) or reconnects.
func (l *limitState) skipSlow() layer {
	return layer{enter: l.slowRefusal, leave: l.noteAttempt}
}

// slowRefusal is skipSlow's enter half: the refusal when c is slow, else
// nil.
func (l *limitState) slowRefusal(c *conn, d *delivery) error {
	if c.answeredLate.Swap(false) {
		c.noteAnswer(d.ClientID)
	}
	if c.slow.Load() {
		l.refused[limitSlowSubscriber].Inc()
		return &deliveryError{failSlowSubscriber,
			fmt.Sprintf("not sent: client %q left its last %d deliveries unanswered; the bus waits on it again once it answers one", d.ClientID, c.timeouts.Load())}
	}
	return nil
}

// noteAttempt is skipSlow's leave half: an answer clears c's timeouts, a
// timeout counts towards slow, and a panic of the bus's own says nothing
// of c.
func (l *limitState) noteAttempt(c *conn, d *delivery, err error) {
	if err == nil {
		c.noteAnswer(d.ClientID)
		return
	}
	switch failKind(err) {
	case failTimeout:
		if c.slow.Load() {
			// Already not waited on: a delivery that was in flight
			// when it turned slow does not add to the count its
			// publishers are told.
			break
		}
		n := c.timeouts.Add(1)
		bound := l.current.Load().SlowSubscriberTimeouts
		if bound > 0 && int(n) >= bound && c.slow.CompareAndSwap(false, true) {
			l.slow.Inc()
			c.log.Warn("not waiting on subscriber any more: deliveries to it fail at once until it answers",
				"client", d.ClientID, "limit", limitSlowSubscriber, "timeouts", n)
		}
	case failError, failBadResult:
		if err != errPanicked {
			c.noteAnswer(d.ClientID) // an answer, if not a useful one: the peer is there
		}
	}
}

// failKind is the Kind of a *deliveryError, or "". It is a function of its
// own because errors.As moves its target to the heap, and returns at once
// for no error: so it costs a successful delivery nothing (settle asks it
// of every one).
func failKind(err error) string {
	if err == nil {
		return ""
	}
	var derr *deliveryError
	if errors.As(err, &derr) {
		return derr.Kind
	}
	return ""
}

// noteAnswer records that c, clientID's connection, answered a
// processMessage call, in time or late: the bus waits on it again.
func (c *conn) noteAnswer(clientID string) {
	if c.timeouts.Load() != 0 {
		c.timeouts.Store(0)
	}
	if c.slow.CompareAndSwap(true, false) {
		c.server.limitState.slow.Dec()
		c.log.Info("subscriber answers again; delivering to it", "client", clientID, "limit", limitSlowSubscriber)
	}
}

// noteLateAnswer is the Stream's OnLateAnswer hook.
func (c *conn) noteLateAnswer() { c.answeredLate.Store(true) }

// forgetSlow drops c from bub_slow_subscribers when it ends.
func (c *conn) forgetSlow() {
	if c.slow.CompareAndSwap(true, false) {
		c.server.limitState.slow.Dec()
	}
}
