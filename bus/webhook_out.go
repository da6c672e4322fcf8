package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/internal/buildinfo"
	"github.com/bub-bus/bub/protocol"
)

// Outgoing webhooks (docs/PROTOCOL.md, "Webhooks out"): a subscription
// whose subscriber is a URL. The bus POSTs each delivery there as the
// processMessage params, signed; the answer's status is the result:
// 2xx processed; 429, 5xx, a timeout or no connection retried with the
// bus's backoff; any other status a refusal, dead-lettered at once.

// WebhookSubscription is a subscription whose subscriber is a URL.
type WebhookSubscription struct {
	// Name makes the subscriber's clientId, bub-webhook-{Name}: letters,
	// digits, '-' and '_'.
	Name string
	// URL is where deliveries are POSTed: http or https.
	URL string
	// Pattern is the topic pattern subscribed to.
	Pattern string
	// Policy is the subscription's propagation policy. Default: the
	// bus's (Options.DefaultPolicy).
	Policy protocol.Policy
	// Secret signs each delivery (Bub-Signature); required. It is never
	// logged.
	Secret []byte
}

// webhookClientPrefix begins a URL subscriber's clientId: reserved, so
// that no peer can take its deliveries or its retries.
const webhookClientPrefix = serverIDPrefix + "webhook-"

// Headers of an outgoing delivery.
const (
	// HeaderSignature is "t=UNIX,v1=HEX": HEX is the HMAC-SHA256, under
	// the subscription's secret, of UNIX, a '.', and the body.
	HeaderSignature = "Bub-Signature"
	// HeaderMessageID and HeaderAttempt repeat the body's messageId and
	// attempt, for a receiver that routes before it parses.
	HeaderMessageID = "Bub-Message-Id"
	HeaderAttempt   = "Bub-Attempt"
)

// urlSubscriber is a subscriber that is a URL: the third kind, beside a
// connection and a cluster stand-in.
type urlSubscriber struct {
	holding
	name    string
	pattern string
	policy  protocol.Policy
	// configured is set for those of Options.WebhookSubscriptions,
	// which webhook.remove leaves alone.
	configured bool
	url        string
	secret     []byte
	client     *http.Client
	// slots bounds the requests in flight to the URL, as a connection's
	// MaxInFlight bounds its own.
	slots chan struct{}
}

var _ subscriber = (*urlSubscriber)(nil)

// addWebhookSubscription puts cfg in the router, and returns its
// subscriber.
func (s *Server) addWebhookSubscription(cfg WebhookSubscription) (*urlSubscriber, error) {
	if err := checkHookName(cfg.Name); err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url %q: want an http:// or https:// URL", cfg.URL)
	}
	if u.User != nil {
		return nil, fmt.Errorf("url %q: no user:password in the URL; the signature authenticates the bus", u.Redacted())
	}
	if len(cfg.Secret) == 0 {
		return nil, errors.New("a secret is required: receivers verify Bub-Signature with it")
	}
	pattern, err := protocol.ParsePattern(cfg.Pattern)
	if err != nil {
		return nil, fmt.Errorf("pattern: %w", err)
	}
	policy := cfg.Policy
	if policy == "" {
		policy = s.opts.DefaultPolicy
	}
	if !policy.Valid() {
		return nil, fmt.Errorf("policy %q: want one of %v", policy, protocol.Policies)
	}
	if s.opts.Cluster != nil {
		return nil, errors.New("webhook subscriptions are not yet shared by a cluster's nodes; run them on a single node")
	}
	clientID := webhookClientPrefix + cfg.Name
	u2 := &urlSubscriber{
		holding: holding{server: s, log: s.log.With("webhook", cfg.Name), clientID: clientID, subs: make(map[string]*subscription)},
		name:    cfg.Name,
		pattern: pattern.String(),
		policy:  policy,
		url:     u.String(),
		secret:  cfg.Secret,
		client:  s.webhookClient,
		slots:   make(chan struct{}, s.opts.MaxInFlight),
	}
	s.webhookMu.Lock()
	defer s.webhookMu.Unlock()
	if s.webhooks[clientID] != nil {
		return nil, fmt.Errorf("the name %q is used twice", cfg.Name)
	}
	_, seq, err := s.cl.cluster.PutSubscription(context.Background(), SharedSubscription{Pattern: pattern.String(), Policy: policy, ClientID: clientID})
	if err != nil {
		return nil, fmt.Errorf("order subscription: %w", err)
	}
	sub := &subscription{seq: seq, pattern: pattern, policy: policy, to: u2}
	u2.subs[pattern.String()] = sub
	if s.webhooks == nil {
		s.webhooks = make(map[string]*urlSubscriber)
	}
	s.webhooks[clientID] = u2
	s.router.insert(sub)
	s.sched.wakeHolds(pattern, clientID)
	return u2, nil
}

// info is u as webhook.list shows it.
func (u *urlSubscriber) info() protocol.Webhook {
	return protocol.Webhook{Name: u.name, ClientID: u.clientID, URL: u.url, Pattern: u.pattern, Policy: u.policy, Configured: u.configured}
}

// webhookSubscriber returns the URL subscriber with clientID, or nil.
func (s *Server) webhookSubscriber(clientID string) *urlSubscriber {
	s.webhookMu.Lock()
	defer s.webhookMu.Unlock()
	return s.webhooks[clientID]
}

// close stops the subscriber's deliveries: it leaves the router.
func (u *urlSubscriber) close(websocket.StatusCode, string) {
	u.mu.Lock()
	u.closed = true
	subs := u.subs
	u.subs = map[string]*subscription{}
	u.mu.Unlock()
	for _, sub := range subs {
		u.server.router.remove(sub)
	}
}

// pendingCapLocked is the bus's per-identity cap: a URL has no grant.
func (u *urlSubscriber) pendingCapLocked(l *Limits) int { return l.MaxPendingPerIdentity }

// deliver POSTs d to the URL and reads the status as the result.
func (u *urlSubscriber) deliver(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
	s := u.server
	ctx, cancel := context.WithTimeout(ctx, s.opts.DeliveryTimeout)
	defer cancel()
	written := d.written
	if d.turn != nil {
		written = d.turn.pass
	}
	// Passed once: when the request is written (on the transport's
	// goroutine), or when the delivery ends without that.
	var once sync.Once
	pass := func() {
		if written != nil {
			once.Do(written)
		}
	}
	defer pass()
	select {
	case u.slots <- struct{}{}:
	case <-ctx.Done():
		return protocol.ProcessMessageResult{}, &deliveryError{failTimeout, fmt.Sprintf("%d requests to the webhook already in flight for %s", cap(u.slots), s.opts.DeliveryTimeout)}
	}
	defer func() { <-u.slots }()
	body := d.AppendParams(nil)
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		// The publisher's next message may go out once this one is
		// written, as on a connection.
		WroteRequest: func(httptrace.WroteRequestInfo) { pass() },
	}), http.MethodPost, u.url, bytes.NewReader(body))
	if err != nil {
		return protocol.ProcessMessageResult{}, &deliveryError{failError, err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "bub/"+buildinfo.Version())
	req.Header.Set(HeaderSignature, signDelivery(u.secret, time.Now(), body))
	req.Header.Set(HeaderMessageID, d.Message.ID)
	req.Header.Set(HeaderAttempt, strconv.Itoa(d.Attempt))
	res, err := u.client.Do(req)
	if err != nil {
		var refused *privateAddressError
		switch {
		case errors.As(err, &refused):
			s.webhookCalls.WithLabelValues(callRefusedAddress).Inc()
			// Not retried: the operator must allow the address.
			return protocol.ProcessMessageResult{Reject: true, Message: refused.Error()}, nil
		case ctx.Err() != nil:
			s.webhookCalls.WithLabelValues(failTimeout).Inc()
			return protocol.ProcessMessageResult{}, &deliveryError{failTimeout, fmt.Sprintf("the webhook did not answer within %s", s.opts.DeliveryTimeout)}
		}
		s.webhookCalls.WithLabelValues(failError).Inc()
		return protocol.ProcessMessageResult{}, &deliveryError{failDisconnected, "webhook: " + err.Error()}
	}
	// The body is read, bounded, so the connection can be reused; what
	// it says is not the bus's business.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	_ = res.Body.Close()
	s.webhookCalls.WithLabelValues(statusClass(res.StatusCode)).Inc()
	switch code := res.StatusCode; {
	case code >= 200 && code < 300:
		return protocol.ProcessMessageResult{Processed: true}, nil
	case code == http.StatusTooManyRequests || code >= 500:
		r := protocol.ProcessMessageResult{ShouldRetry: true, Message: fmt.Sprintf("webhook answered %d", code)}
		if secs, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && secs > 0 {
			r.RetrySeconds = float64(secs)
		}
		return r, nil
	default:
		return protocol.ProcessMessageResult{Reject: true, Message: fmt.Sprintf("webhook answered %d", code)}, nil
	}
}

// signDelivery is the Bub-Signature of body sent at now.
func signDelivery(secret []byte, now time.Time, body []byte) string {
	t := strconv.FormatInt(now.Unix(), 10)
	return "t=" + t + ",v1=" + fmt.Sprintf("%x", mac(secret, []byte(t+"."), body))
}

// Outcomes of a call to a webhook URL, its metrics label besides the
// status classes.
const callRefusedAddress = "refused_address"

var webhookCallOutcomes = []string{"2xx", "3xx", "4xx", "429", "5xx", failTimeout, failError, callRefusedAddress}

// statusClass is the metrics label of a status.
func statusClass(code int) string {
	switch {
	case code == http.StatusTooManyRequests:
		return "429"
	case code >= 200 && code < 300:
		return "2xx"
	case code >= 300 && code < 400:
		return "3xx"
	case code >= 400 && code < 500:
		return "4xx"
	}
	return "5xx"
}

// privateAddressError is a dial to an address the bus does not call
// without --webhook-allow-private.
type privateAddressError struct {
	addr netip.Addr
}

func (e *privateAddressError) Error() string {
	return fmt.Sprintf("refused to call %s: a loopback, private or link-local address (allow with --webhook-allow-private)", e.addr)
}

// notPublic are the ranges IsPrivate and its kin do not cover that are
// no place on the Internet either.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64: may reach any IPv4
	netip.MustParsePrefix("2002::/16"),    // 6to4: likewise
}

// publicAddress reports whether the bus may call a, unless allowed.
func publicAddress(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsMulticast() || a.IsInterfaceLocalMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// newWebhookClient is the HTTP client of the URL subscribers. Unless
// allowPrivate, its dialer refuses every address that is not public,
// checked on the address dialled, after DNS: a name that resolves, or
// re-resolves (DNS rebinding), to an inside address is refused as the
// address itself is. Proxies from the environment are not used (they
// would dial for it), and redirects are not followed: a 3xx is the
// answer.
func newWebhookClient(timeout time.Duration, allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: timeout}
	if !allowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("webhook dial %q: %w", address, err)
			}
			if !publicAddress(ap.Addr()) {
				return &privateAddressError{ap.Addr()}
			}
			return nil
		}
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         dialer.DialContext,
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: timeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
