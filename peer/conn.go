package peer

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/internal/buildinfo"
	"github.com/bub-bus/bub/internal/outbound"
	"github.com/bub-bus/bub/internal/redact"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// Options configure a Conn. A nil *Options, or the zero value of a field,
// means the default.
type Options struct {
	// ClientID is the identity the bus knows the Conn by: the "from" of
	// every message it sends and the client_id of its acks. A newer
	// connection that initializes with the same ClientID takes over, and
	// the bus closes this one (see ErrTakenOver), so two processes must
	// not share one. Default: "peer-" and random hex, which suits a
	// throwaway tool but gives an agent no stable identity.
	ClientID string
	// ClientInfo describes the software, for the bus's logs.
	// Default: {Name: "bub-peer", Version: the build's version}.
	ClientInfo *protocol.ClientInfo
	// DefaultTopic is where SendMessage sends when given no topic; the
	// bus resolves it. Default: none, and a send without a topic fails.
	DefaultTopic string
	// PublishOnly makes a Conn that only publishes: it cannot subscribe,
	// and it does not take over the connection that holds its ClientID,
	// so a tool can send as an agent while the agent stays connected.
	PublishOnly bool
	// CallTimeout bounds every call to the bus (initialize, subscribe,
	// unsubscribe, sendMessage, ping), besides the caller's context.
	// A sendMessage answers only once every subscriber has, so it must
	// exceed the bus's delivery timeout times the subscribers in a chain;
	// Conn.Limits reports that timeout once connected. Default: 30s.
	CallTimeout time.Duration
	// HandlerTimeout is the deadline of the context a Handler gets. The
	// Conn still waits for the handler to return before it answers, so a
	// handler must honour its context. Default: the delivery timeout the
	// bus announced at initialize less a tenth, and less at most a second
	// (29s of the bus's default 30s), so that the handler's answer, even
	// a give-up, reaches the bus before the bus stops waiting and
	// delivers the message again. A value above the bus's delivery
	// timeout is used as set, but then the bus gives up first and may
	// deliver the message again while the handler still runs.
	HandlerTimeout time.Duration
	// MaxConcurrentHandlers bounds the handlers running at once, but for
	// those of subscriptions with a bound of their own
	// (SubscribeOptions.MaxConcurrentHandlers). A delivery beyond it is
	// answered at once with ShouldRetry, never queued, so the read loop
	// never blocks. Default: 64.
	MaxConcurrentHandlers int
	// NoReconnect makes the Conn end, rather than reconnect, when the
	// connection drops; command-line tools that make one call want that.
	NoReconnect bool
	// RetryUnauthorized keeps reconnecting when the bus refuses the
	// credential (see ErrRefused), for a peer whose credential an
	// operator is expected to fix on the bus's side while it waits.
	// Default: false, the Conn ends with ErrRefused.
	RetryUnauthorized bool
	// ReconnectMin is the delay before the first reconnect attempt; each
	// failed attempt doubles it, up to ReconnectMax, with jitter.
	// Default: 100ms.
	ReconnectMin time.Duration
	// ReconnectMax caps the delay between reconnect attempts.
	// Default: 30s.
	ReconnectMax time.Duration
	// WriteTimeout bounds the write of one message to the bus; a
	// connection that cannot write within it is dropped. Default: 10s.
	WriteTimeout time.Duration
	// MaxMessageBytes is the largest message the Conn reads from the bus.
	// Default: 4 MiB, above the bus's default 1 MiB for a published
	// message, because a delivery wraps the payload in more fields.
	MaxMessageBytes int64
	// Token is the credential presented to the bus, as
	// "Authorization: Bearer" on the WebSocket upgrade. It is never
	// logged. Default: none (a bus without auth needs none); DialEnv
	// reads BUB_TOKEN.
	Token string
	// TLSConfig is used for wss:// URLs, e.g. to trust a bus's own CA.
	// Default: the system's roots.
	TLSConfig *tls.Config
	// Logger receives connection events (reconnects, handler panics).
	// Default: slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.ClientID == "" {
		o.ClientID = "peer-" + randomHex(6)
	}
	if o.ClientInfo == nil {
		o.ClientInfo = &protocol.ClientInfo{Name: "bub-peer", Version: buildinfo.Version()}
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 30 * time.Second
	}
	if o.MaxConcurrentHandlers <= 0 {
		o.MaxConcurrentHandlers = 64
	}
	if o.ReconnectMin <= 0 {
		o.ReconnectMin = 100 * time.Millisecond
	}
	if o.ReconnectMax <= 0 {
		o.ReconnectMax = 30 * time.Second
	}
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = o.ReconnectMin
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 4 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Conn is a connection to the bus, kept up across drops (see the package
// documentation on reconnecting). Its methods are safe for concurrent use,
// handlers included, except Close, which waits for running handlers and
// so must not be called from one.
type Conn struct {
	// urls are the bus's addresses, in the order given; at is the index
	// of the one the current or last session used. Only the goroutine
	// that establishes sessions (Dial's, then the supervisor's) touches
	// at, so it needs no lock.
	urls []string
	at   int
	opts Options
	log  *slog.Logger

	// ctx lives until the Conn ends for good; its cause is the reason
	// (ErrClosed, ErrTakenOver, the lost connection). Handlers' contexts
	// derive from it.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// slots bounds the handlers running at once.
	slots chan struct{}
	// work counts the supervisor and running handlers. Add only under mu
	// while !ended, so Close's Wait never races an Add.
	work sync.WaitGroup

	// subMu serializes subscribe, unsubscribe and re-subscription, so the
	// bus receives patterns in the order subs lists them.
	subMu sync.Mutex

	// mu guards the fields below. Lock order: subMu, then mu; mu is never
	// held across network I/O.
	mu        sync.Mutex
	session   *session        // nil while disconnected
	limits    protocol.Limits // from the latest initialize
	ended     bool
	subs      []*subscription          // in subscribe order
	byPattern map[string]*subscription // the same, by pattern string
}

// session is one WebSocket connection and its initialize; a Conn has a new
// one after every reconnect.
type session struct {
	stream *rpcstream.Stream
	// done is closed when the read loop has ended, err set before: why
	// reading stopped, which tells a takeover by a newer connection from a
	// dropped network.
	done chan struct{}
	err  error
	// serverID is the bus's, from initialize: the from of its own events.
	serverID string
	// unsure holds the subscribes on this connection whose answer never
	// came (their call timed out), by pattern: the bus may have applied
	// them, and says "already subscribed" when they are tried again.
	// Changed under Conn.subMu and unsureMu, read under either: the read
	// loop checks it (isUnsure) while a Subscribe holding subMu waits on
	// that loop for its answer.
	unsure   map[string]protocol.SubscribeParams
	unsureMu sync.Mutex
}

// isUnsure reports whether the bus may hold a subscription to pattern
// that this session's subscribe never heard the answer for.
func (s *session) isUnsure(pattern string) bool {
	s.unsureMu.Lock()
	defer s.unsureMu.Unlock()
	_, ok := s.unsure[pattern]
	return ok
}

// setUnsure records, or with ok false forgets, a subscribe whose answer
// never came. The caller holds Conn.subMu.
func (s *session) setUnsure(p protocol.SubscribeParams, ok bool) {
	s.unsureMu.Lock()
	defer s.unsureMu.Unlock()
	if !ok {
		delete(s.unsure, p.Topic)
		return
	}
	if s.unsure == nil {
		s.unsure = make(map[string]protocol.SubscribeParams)
	}
	if _, known := s.unsure[p.Topic]; !known {
		s.unsure[p.Topic] = p
	}
}

// close drops the connection at once and waits for its read loop, so that
// no goroutine outlives the session. It must not be called on the read
// loop.
func (s *session) close() {
	_ = s.stream.Close()
	<-s.done
}

// cause returns the error that ended reading; call it after done is closed.
func (s *session) cause() error {
	if s.err == nil {
		return errors.New("connection closed")
	}
	return s.err
}

// Dial connects to the bus at url (ws://host:port/), initializes with
// opts.ClientID, and returns the Conn. ctx bounds the dial and initialize
// only; the Conn lives until Close, or until it ends for good (see Done).
//
// url may list several addresses of one bus, comma-separated
// (ws://a:7892/,ws://b:7892/), as the nodes of a cluster: Dial tries them
// in order and the first that answers wins. A node that cannot be reached
// (or drops the connection before initialize completes) is skipped; one
// that refuses (ErrUnauthorized, or an error answer to initialize) ends
// Dial with that error, since another node of the same bus would refuse
// alike. Each address gets Options.CallTimeout of its own, within ctx.
// After a connection loss the Conn reconnects to the next address first,
// round robin (see the package documentation on reconnecting). Each
// address must be a ws://, wss://, http:// or https:// URL with a host,
// and may not contain a comma (write it %2C); spaces around the commas
// are ignored. An invalid one fails Dial, named in the error.
//
// Dial does not retry: when no address can be reached it returns the last
// error, and reconnecting starts only once a first connection was made.
func Dial(ctx context.Context, url string, opts *Options) (*Conn, error) {
	urls, err := splitURLs(url)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	o.setDefaults()
	if err := protocol.ValidateClientID(o.ClientID); err != nil {
		return nil, fmt.Errorf("dial %s: %w", redact.URLs(url), err)
	}
	c := &Conn{
		urls:      urls,
		opts:      o,
		log:       o.Logger.With("bus", redact.URLs(url), "client", o.ClientID),
		slots:     make(chan struct{}, o.MaxConcurrentHandlers),
		byPattern: make(map[string]*subscription),
	}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	var s *session
	for i, u := range urls {
		actx, cancel := context.WithTimeout(ctx, o.CallTimeout)
		s, err = c.establish(actx, u)
		cancel()
		if err == nil {
			c.at = i
			break
		}
		if ctx.Err() != nil || refused(err) {
			break
		}
	}
	if err != nil {
		c.cancel(err)
		return nil, err
	}
	c.work.Add(1)
	go c.supervise(s)
	return c, nil
}

// splitURLs splits Dial's url into its addresses and checks each, so that
// a typo in the third of three is reported at once rather than when the
// first two nodes are down.
func splitURLs(list string) ([]string, error) {
	parts := strings.Split(list, ",")
	urls := make([]string, 0, len(parts))
	for i, raw := range parts {
		raw = strings.TrimSpace(raw)
		// A URL may carry user:password, which an error must not show.
		where := fmt.Sprintf("bus URL %q", redact.URL(raw))
		if len(parts) > 1 {
			where = fmt.Sprintf("bus URL %d of %d (%q) in %q", i+1, len(parts), redact.URL(raw), redact.URLs(list))
		}
		if raw == "" {
			return nil, fmt.Errorf("%s is empty", where)
		}
		u, err := redact.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		switch {
		case u.Scheme != "ws" && u.Scheme != "wss" && u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("%s: scheme must be ws or wss, not %q", where, u.Scheme)
		case u.Host == "":
			return nil, fmt.Errorf("%s has no host", where)
		case strings.HasSuffix(u.Host, ":"):
			// A colon with no port after it would dial the scheme's
			// default port (80), which is not where a bus listens.
			return nil, fmt.Errorf("%s has an empty port after %q", where, u.Host)
		}
		urls = append(urls, raw)
	}
	return urls, nil
}

// refused reports whether err from establish is the bus saying no, as
// opposed to the bus not being there: another node of the same bus would
// say no as well, so Dial stops there.
func refused(err error) bool {
	var rpcErr *protocol.Error
	return errors.Is(err, ErrUnauthorized) || errors.As(err, &rpcErr)
}

// credentialRefused reports whether err from establish is the bus
// refusing the credential itself, rather than anything else it may say.
func credentialRefused(err error) bool {
	code := protocol.CodeOf(err)
	return errors.Is(err, ErrUnauthorized) || code == protocol.CodeUnauthorized || code == protocol.CodeForbidden
}

// ClientID returns the clientId the Conn initialized with.
func (c *Conn) ClientID() string { return c.opts.ClientID }

// Limits returns the bounds the bus announced at the latest initialize:
// the largest message it reads and how long it waits for a subscriber.
// Zero fields mean the bus did not say (one older than the field).
func (c *Conn) Limits() protocol.Limits {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limits
}

// Done returns a channel that is closed when the Conn has ended for good:
// after Close, after a takeover of its clientId, or after a dropped
// connection with Options.NoReconnect. It stays open while reconnecting.
func (c *Conn) Done() <-chan struct{} { return c.ctx.Done() }

// Bind returns a copy of ctx that is also cancelled when the Conn ends
// for good (Done), and the func that releases it: a program whose work is
// the Conn's (a bridge, a server acting as this clientId) stops with it.
func (c *Conn) Bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	unbind := context.AfterFunc(c.ctx, cancel)
	return ctx, func() { unbind(); cancel() }
}

// Err returns why the Conn ended (ErrClosed, ErrTakenOver, or the error
// that dropped the connection), or nil while it has not.
func (c *Conn) Err() error {
	if c.ctx.Err() == nil {
		return nil
	}
	return context.Cause(c.ctx)
}

// Close closes the connection with a normal WebSocket close, cancels the
// contexts of running handlers and waits for them to return. Calls after
// Close fail with ErrClosed. Close is idempotent.
func (c *Conn) Close() error {
	c.mu.Lock()
	c.ended = true
	s := c.session
	c.session = nil
	c.mu.Unlock()
	if s != nil {
		// The close handshake lets the bus tell a goodbye from a crash.
		_ = s.stream.CloseWith(websocket.StatusNormalClosure, "client closed")
		s.close()
	}
	c.cancel(ErrClosed)
	c.work.Wait()
	return nil
}

// end ends the Conn for good with reason, without waiting for handlers.
func (c *Conn) end(reason error) {
	c.mu.Lock()
	c.ended = true
	s := c.session
	c.session = nil
	c.mu.Unlock()
	c.cancel(reason)
	if s != nil {
		s.close()
	}
}

// establish dials url, initializes, and re-subscribes every subscription
// in order, then makes the new session current. On Dial there is nothing to
// re-subscribe yet.
func (c *Conn) establish(ctx context.Context, url string) (*session, error) {
	// outbound batches the session's writes: requests and answers
	// written while another is on its way leave in one write call.
	ws, out, resp, err := outbound.Dial(ctx, url, c.dialOptions(), c.opts.WriteTimeout)
	// url may carry user:password, which an error must not show.
	shown := redact.URL(url)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			err = ErrUnauthorized
		}
		return nil, fmt.Errorf("dial %s: %w", shown, err)
	}
	ws.SetReadLimit(c.opts.MaxMessageBytes)
	s := &session{stream: rpcstream.NewOutbound(ws, out), done: make(chan struct{})}
	go c.read(s)

	params := protocol.InitializeParams{ClientID: c.opts.ClientID, ClientInfo: c.opts.ClientInfo, DefaultTopic: c.opts.DefaultTopic, PublishOnly: c.opts.PublishOnly}
	var result protocol.InitializeResult
	if err := c.callOn(ctx, s, protocol.MethodInitialize, params, &result, 0); err != nil {
		s.close()
		return nil, fmt.Errorf("initialize %s as %q: %w", shown, c.opts.ClientID, err)
	}
	s.serverID = result.ServerID

	// Held until the patterns are restored, so a Subscribe made meanwhile
	// lands after them and routing order is what it was.
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		s.close()
		return nil, ErrClosed
	}
	c.session = s
	if result.Limits != nil {
		c.limits = *result.Limits
	}
	subs := append([]*subscription(nil), c.subs...)
	c.mu.Unlock()
	for _, sub := range subs {
		if err := c.callOn(ctx, s, protocol.MethodSubscribe, sub.params(), nil, 0); err != nil {
			c.drop(s)
			return nil, fmt.Errorf("re-subscribe %q on %s: %w", sub.pattern, shown, err)
		}
	}
	return s, nil
}

// drop closes session s and forgets it if it is current.
func (c *Conn) drop(s *session) {
	c.mu.Lock()
	if c.session == s {
		c.session = nil
	}
	c.mu.Unlock()
	s.close()
}

// current returns the session to call on, or why there is none.
func (c *Conn) current() (*session, error) {
	c.mu.Lock()
	s, ended := c.session, c.ended
	c.mu.Unlock()
	if s != nil {
		return s, nil
	}
	return nil, c.unavailable(ended)
}

// unavailable says why no call can be made: closed, ended for another
// reason, or reconnecting.
func (c *Conn) unavailable(ended bool) error {
	if !ended {
		return ErrDisconnected
	}
	cause := context.Cause(c.ctx)
	if cause == nil || errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("%w: %w", ErrDisconnected, cause)
}

// call makes one call on the current session.
func (c *Conn) call(ctx context.Context, method string, params, result any) error {
	s, err := c.current()
	if err != nil {
		return err
	}
	return c.callOn(ctx, s, method, params, result, 0)
}

// callOn calls method on session s with params (raw JSON as it is, or a
// value to marshal) and decodes the answer into result (nil discards it).
func (c *Conn) callOn(ctx context.Context, s *session, method string, params, result any, timeout time.Duration) error {
	raw, err := encodeJSON(params)
	if err != nil {
		return fmt.Errorf("%s params: %w", method, err)
	}
	w := getWaiter()
	answer, err := c.callRaw(ctx, s, w, method, rawParams(raw), timeout)
	w.put()
	if err != nil || result == nil {
		return err
	}
	if err := json.Unmarshal(answer, result); err != nil {
		return fmt.Errorf("decode %s result: %w", method, err)
	}
	return nil
}

// rawParams are params encoded already, written as they are.
type rawParams []byte

func (p rawParams) AppendParams(dst []byte) []byte { return append(dst, p...) }

// callRaw sends a request whose params p appends, encoded, straight into
// the request's frame, and returns the result as the bus sent it; w is the
// waiter the call waits with (getWaiter), which the caller puts back once
// done with params. The call is bounded by timeout, or
// Options.CallTimeout when it is zero, and what went wrong becomes the
// package's errors: the bus's answer as a *protocol.Error, a lost
// connection as ErrDisconnected or ErrClosed.
func (c *Conn) callRaw(ctx context.Context, s *session, w *waiter, method string, params rpcstream.ParamsAppender, timeout time.Duration) (json.RawMessage, error) {
	if timeout <= 0 {
		timeout = c.opts.CallTimeout
	}
	result, answered, timedOut, err := w.wait(ctx, s.stream, method, params, timeout)
	if answered && err == nil {
		return result, nil
	}
	var rpcErr *rpcstream.ResponseError
	switch {
	case errors.As(err, &rpcErr):
		e := &protocol.Error{Code: rpcErr.Code, Message: rpcErr.Message}
		if rpcErr.Data != nil {
			e.Data = rpcErr.Data
		}
		return nil, e
	case timedOut:
		return nil, fmt.Errorf("%w: no answer within %s: %w", ErrCallTimeout, timeout, context.DeadlineExceeded)
	case err == nil:
		return nil, ctx.Err()
	case errors.Is(err, rpcstream.ErrClosed):
		c.mu.Lock()
		ended := c.ended
		c.mu.Unlock()
		if ended {
			return nil, c.unavailable(true)
		}
		return nil, fmt.Errorf("%w: connection lost before the answer", ErrDisconnected)
	}
	// A failed write: the WebSocket is closing, and the read loop will
	// notice.
	return nil, fmt.Errorf("%w: %w", ErrDisconnected, err)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dialOptions carries the credential and TLS settings into the upgrade.
func (c *Conn) dialOptions() *websocket.DialOptions {
	o := &websocket.DialOptions{}
	if c.opts.Token != "" {
		o.HTTPHeader = http.Header{"Authorization": {"Bearer " + c.opts.Token}}
	}
	if c.opts.TLSConfig != nil {
		o.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: c.opts.TLSConfig}}
	}
	return o
}

// ServerID returns the serverId of the bus this Conn is connected to, the
// from of the bus's own events (system:client.*), or "" while it is not
// connected. Trust an event on a system: topic only when its from is
// this.
func (c *Conn) ServerID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session == nil {
		return ""
	}
	return c.session.serverID
}
