package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/internal/buildinfo"
	"github.com/bub-bus/bub/protocol"
)

// Outgoing webhooks (docs/PROTOCOL.md, "Webhooks out"): a subscription
// whose subscriber is a URL. The bus POSTs each delivery there as the
// processMessage params, signed; the answer's status is the result:
// 2xx processed; 429, 5xx, a timeout or no connection retried with the
// bus's backoff; any other status a refusal, dead-lettered at once.

// Subscription is a subscription whose subscriber is a URL.
type Subscription struct {
	// Name makes the subscriber's clientId, bub-webhook-{Name}: letters,
	// digits, '-' and '_'.
	Name string
	// URL is where deliveries are POSTed: http or https.
	URL string
	// Pattern is the topic pattern subscribed to.
	Pattern string
	// Policy is the subscription's propagation policy. Default: the
	// bus's (bus.Options.DefaultPolicy).
	Policy protocol.Policy
	// Secret signs each delivery (Bub-Signature); required. It is never
	// logged.
	Secret []byte
	// PayloadField, when set, makes each delivery's body that field of
	// the message's payload, alone, rather than the processMessage
	// params: the body a receiver of its own protocol expects (the A2A
	// server's push notifications use it). A payload without the field
	// is refused, dead-lettered at once.
	PayloadField string
	// Headers are sent with each delivery (an Authorization the
	// receiver wants); like Secret, never logged or listed.
	// Content-Type may be set; the Bub-* headers, Host and the
	// hop-by-hop ones may not.
	Headers map[string]string
}

// clientPrefix begins a URL subscriber's clientId: under the bus's
// reserved "bub-", so that no peer can take its deliveries or its
// retries.
const clientPrefix = "bub-webhook-"

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

// urlSubscriber is a subscriber that is a URL, in the bus's router as a
// bus.Subscriber.
type urlSubscriber struct {
	info protocol.Webhook
	url  string
	// secret signs its deliveries.
	secret []byte
	// field and header are Subscription's PayloadField and Headers.
	field  string
	header http.Header
	// slots bounds the requests in flight to the URL, as a connection's
	// MaxInFlight bounds its own.
	slots chan struct{}
	sub   *bus.Subscriber
}

// errNotShared refuses webhook subscriptions on a cluster.
var errNotShared = errors.New("webhook subscriptions are not yet shared by a cluster's nodes; run them on a single node")

// subscribe puts cfg in the bus's router, and returns its subscriber;
// configured is set for those of Options.Subscriptions, which
// webhook.remove leaves alone.
func (w *webhooks) subscribe(cfg Subscription, configured bool) (*urlSubscriber, error) {
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
	header, err := deliveryHeaders(cfg.Headers)
	if err != nil {
		return nil, err
	}
	if w.clustered {
		return nil, errNotShared
	}
	clientID := clientPrefix + cfg.Name
	us := &urlSubscriber{url: u.String(), secret: cfg.Secret, field: cfg.PayloadField, header: header, slots: make(chan struct{}, w.maxInFlight)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs[clientID] != nil {
		return nil, fmt.Errorf("the name %q is used twice", cfg.Name)
	}
	sub, err := w.bus.Subscribe(bus.SubscriberSpec{ClientID: clientID, Pattern: cfg.Pattern, Policy: cfg.Policy}, func(ctx context.Context, d *bus.Delivery) (protocol.ProcessMessageResult, error) {
		return w.deliver(ctx, us, d)
	})
	if err != nil {
		return nil, err
	}
	// Subscribe took the pattern and the policy; what it subscribed is
	// their canonical form.
	pattern, _ := protocol.ParsePattern(cfg.Pattern)
	policy := cfg.Policy
	if policy == "" {
		policy = w.bus.Options().DefaultPolicy
	}
	us.sub = sub
	us.info = protocol.Webhook{Name: cfg.Name, ClientID: clientID, URL: us.url, Pattern: pattern.String(), Policy: policy, PayloadField: cfg.PayloadField, Configured: configured}
	w.subs[clientID] = us
	return us, nil
}

// unsubscribe takes u out of the router and the registry; its pending
// retries find no subscriber and are dead-lettered subscriber_gone in
// time.
func (w *webhooks) unsubscribe(u *urlSubscriber) {
	w.mu.Lock()
	if w.subs[u.info.ClientID] == u {
		delete(w.subs, u.info.ClientID)
	}
	w.mu.Unlock()
	u.sub.Close()
}

// subscriber returns the URL subscriber with clientID, or nil.
func (w *webhooks) subscriber(clientID string) *urlSubscriber {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.subs[clientID]
}

// timeoutError is a call that ran out of the delivery timeout: the bus
// counts it a timeout (bus.DeliverFunc).
type timeoutError string

func (e timeoutError) Error() string      { return string(e) }
func (timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// deliver POSTs d to u's URL and reads the status as the result.
func (w *webhooks) deliver(ctx context.Context, u *urlSubscriber, d *bus.Delivery) (protocol.ProcessMessageResult, error) {
	select {
	case u.slots <- struct{}{}:
	case <-ctx.Done():
		return protocol.ProcessMessageResult{}, timeoutError(fmt.Sprintf("%d requests to the webhook already in flight for %s", cap(u.slots), w.timeout))
	}
	defer func() { <-u.slots }()
	defer func() {
		if w.stopping.Load() {
			// The bus is shutting down: leave no connection idle
			// behind it.
			w.client.CloseIdleConnections()
		}
	}()
	var body []byte
	if u.field == "" {
		body = d.AppendParams(nil)
	} else {
		var fields map[string]json.RawMessage
		if json.Unmarshal(d.Message.Payload, &fields) != nil || len(fields[u.field]) == 0 {
			// Not retried: the payload will not grow the field.
			return protocol.ProcessMessageResult{Reject: true, Message: fmt.Sprintf("the payload has no field %q, which this webhook POSTs as its body", u.field)}, nil
		}
		body = fields[u.field]
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		// The publisher's next message may go out once this one is
		// written, as on a connection.
		WroteRequest: func(httptrace.WroteRequestInfo) { d.Written() },
	}), http.MethodPost, u.url, bytes.NewReader(body))
	if err != nil {
		return protocol.ProcessMessageResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range u.header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "bub/"+buildinfo.Version())
	req.Header.Set(HeaderSignature, signDelivery(u.secret, time.Now(), body))
	req.Header.Set(HeaderMessageID, d.Message.ID)
	req.Header.Set(HeaderAttempt, strconv.Itoa(d.Attempt))
	res, err := w.client.Do(req)
	if err != nil {
		var refused *privateAddressError
		switch {
		case errors.As(err, &refused):
			w.calls.WithLabelValues(callRefusedAddress).Inc()
			// Not retried: the operator must allow the address.
			return protocol.ProcessMessageResult{Reject: true, Message: refused.Error()}, nil
		case ctx.Err() != nil:
			w.calls.WithLabelValues(failTimeout).Inc()
			return protocol.ProcessMessageResult{}, timeoutError(fmt.Sprintf("the webhook did not answer within %s", w.timeout))
		}
		w.calls.WithLabelValues(failError).Inc()
		// A new error, not err wrapped: a deadline of the dialer's is no
		// timeout of the delivery's, but a URL that could not be reached.
		return protocol.ProcessMessageResult{}, errors.New("webhook: " + err.Error())
	}
	// The body is read, bounded, so the connection can be reused; what
	// it says is not the bus's business.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	_ = res.Body.Close()
	w.calls.WithLabelValues(statusClass(res.StatusCode)).Inc()
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

// reservedHeaders are the headers a subscription may not set: the
// bus's own, and those HTTP itself manages.
var reservedHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Keep-Alive": true,
	"Te": true, "Trailer": true, "Upgrade": true, "Proxy-Authorization": true, "Proxy-Connection": true, "User-Agent": true,
}

// deliveryHeaders checks a subscription's Headers and returns them
// canonical.
func deliveryHeaders(headers map[string]string) (http.Header, error) {
	h := http.Header{}
	for k, v := range headers {
		ck := http.CanonicalHeaderKey(k)
		switch {
		case !httpguts.ValidHeaderFieldName(k):
			return nil, fmt.Errorf("header %q: not a header name", k)
		case !httpguts.ValidHeaderFieldValue(v):
			return nil, fmt.Errorf("header %s: its value holds a character a header may not", ck)
		case reservedHeaders[ck] || strings.HasPrefix(ck, "Bub-"):
			return nil, fmt.Errorf("header %s: the bus sets it; a webhook may not", ck)
		}
		h.Set(ck, v)
	}
	return h, nil
}

// signDelivery is the Bub-Signature of body sent at now.
func signDelivery(secret []byte, now time.Time, body []byte) string {
	t := strconv.FormatInt(now.Unix(), 10)
	return "t=" + t + ",v1=" + fmt.Sprintf("%x", mac(secret, []byte(t+"."), body))
}

// Outcomes of a call to a webhook URL, its metrics label besides the
// status classes: the bus's delivery outcomes' names where they are the
// same.
const (
	failTimeout        = "timeout"
	failError          = "error"
	callRefusedAddress = "refused_address"
)

var callOutcomes = []string{"2xx", "3xx", "4xx", "429", "5xx", failTimeout, failError, callRefusedAddress}

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

// newClient is the HTTP client of the URL subscribers. Unless
// allowPrivate, its dialer refuses every address that is not public,
// checked on the address dialled, after DNS: a name that resolves, or
// re-resolves (DNS rebinding), to an inside address is refused as the
// address itself is. Proxies from the environment are not used (they
// would dial for it), and redirects are not followed: a 3xx is the
// answer.
func newClient(timeout time.Duration, allowPrivate bool) *http.Client {
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
