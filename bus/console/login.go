package console

import (
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/protocol"
)

// Console logins are bounded three ways: attempts per address and
// logins per identity are throttled (a token bucket each, answered 429
// with Retry-After), an identity holds at most
// maxConsoleSessionsPerIdentity sessions (its next login ends its own
// oldest), and the table of maxConsoleSessions is never made room in by
// ending an admin's session for a login without admin.

// Outcomes of a console login, the label of bub_console_logins_total.
const (
	loginOK        = "ok"
	loginRefused   = "refused"
	loginThrottled = "throttled"
	loginFull      = "full"
)

// newLoginMetric registers bub_console_logins_total.
func newLoginMetric(reg prometheus.Registerer) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_console_logins_total",
		Help: "Console logins, by outcome (ok, refused: credential not accepted, throttled: too many attempts from the address or for the identity, full: no session could be made room for).",
	}, []string{"outcome"})
	for _, o := range []string{loginOK, loginRefused, loginThrottled, loginFull} {
		v.WithLabelValues(o)
	}
	reg.MustRegister(v)
	return v
}

// The console's login throttle: a burst of loginBurst attempts, then one
// every loginEvery, per address and per identity.
const (
	loginBurst = 10
	loginEvery = 6 * time.Second
	// maxLoginBuckets bounds the buckets kept; full ones (nobody tried
	// for a while) are forgotten first.
	maxLoginBuckets = 4096
)

// loginThrottle is the console's login buckets, by "address IP" and
// "identity NAME".
type loginThrottle struct {
	// mu guards all.
	mu  sync.Mutex
	all map[string]*rate.Limiter
}

// allow takes a token from key's bucket at now, or returns the -32012
// that says when to try again (a 429 with Retry-After over HTTP).
func (t *loginThrottle) allow(key string, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.all[key]
	if l == nil {
		if len(t.all) >= maxLoginBuckets {
			for k, old := range t.all {
				if old.TokensAt(now) >= loginBurst {
					delete(t.all, k)
				}
			}
		}
		if t.all == nil {
			t.all = make(map[string]*rate.Limiter)
		}
		l = rate.NewLimiter(rate.Every(loginEvery), loginBurst)
		if len(t.all) >= maxLoginBuckets {
			// Still full: every bucket is in use, by a flood; the new
			// one starts empty, so a flood of addresses gains nothing.
			l.AllowN(now, loginBurst)
		}
		t.all[key] = l
	}
	if l.AllowN(now, 1) {
		return nil
	}
	wait := time.Duration((1 - l.TokensAt(now)) * float64(loginEvery))
	ms := max(1, wait.Milliseconds())
	return bus.RateLimitedError(time.Duration(ms)*time.Millisecond, "too many console logins from this "+key)
}

// remoteIP is the IP address of a request's RemoteAddr, the key of the
// throttle by address: the port differs from one connection to the next.
func remoteIP(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// addLocked adds sess, of an identity with admin or not, making room:
// the identity's own oldest session goes once it holds
// maxConsoleSessionsPerIdentity (on an open bus, where nobody has an
// identity, only the table's bound applies); in a full table, its own
// oldest, else for an admin the oldest session without admin (else the
// oldest); a login without admin finding only others' sessions is
// refused. The caller holds t.mu.
func (t *sessions) addLocked(sess *session, admin bool) error {
	if t.all == nil {
		t.all = make(map[string]*session)
	}
	t.dropExpiredLocked(time.Now())
	mine := func(o *session) bool { return o.identity == sess.identity }
	if sess.identity != "" && t.countLocked(mine) >= maxConsoleSessionsPerIdentity {
		t.endOldestLocked(mine)
	}
	if len(t.all) >= maxConsoleSessions && !t.endOldestLocked(mine) {
		switch {
		case admin:
			if !t.endOldestLocked(func(o *session) bool { return !o.admin.Load() }) {
				t.endOldestLocked(func(*session) bool { return true })
			}
		default:
			return protocol.Errorf(protocol.ErrLimitReached, "the console holds %d sessions, of other identities; try again once some end", len(t.all))
		}
	}
	t.all[sess.id] = sess
	return nil
}

// countLocked counts the sessions of.
func (t *sessions) countLocked(of func(*session) bool) int {
	n := 0
	for _, o := range t.all {
		if of(o) {
			n++
		}
	}
	return n
}

// endOldestLocked ends the session of that expires first, and reports
// whether there was one.
func (t *sessions) endOldestLocked(of func(*session) bool) bool {
	var oldest *session
	for _, o := range t.all {
		if of(o) && (oldest == nil || o.expires.Before(oldest.expires)) {
			oldest = o
		}
	}
	if oldest != nil {
		delete(t.all, oldest.id)
	}
	return oldest != nil
}
