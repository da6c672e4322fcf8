package bus

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

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

// newConsoleLoginMetric registers bub_console_logins_total.
func newConsoleLoginMetric(reg prometheus.Registerer) *prometheus.CounterVec {
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
	return &protocol.Error{
		Code:    protocol.CodeRateLimited,
		Message: fmt.Sprintf("%s: too many console logins from this %s; retry after %d ms", protocol.ErrRateLimited.Message, key, ms),
		Data:    rateLimitedData{RetryAfterMS: ms},
	}
}

// addLocked adds sess, of an identity with admin or not, making room:
// the identity's own oldest session goes once it holds
// maxConsoleSessionsPerIdentity (on an open bus, where nobody has an
// identity, only the table's bound applies); in a full table, its own
// oldest, else for an admin the oldest session without admin (else the
// oldest); a login without admin finding only others' sessions is
// refused. The caller holds c.mu.
func (c *consoleState) addLocked(sess *consoleSession, admin bool) error {
	if c.sessions == nil {
		c.sessions = make(map[string]*consoleSession)
	}
	c.dropExpiredLocked(time.Now())
	mine := func(o *consoleSession) bool { return o.identity == sess.identity }
	if sess.identity != "" && c.countLocked(mine) >= maxConsoleSessionsPerIdentity {
		c.endOldestLocked(mine)
	}
	if len(c.sessions) >= maxConsoleSessions && !c.endOldestLocked(mine) {
		switch {
		case admin:
			if !c.endOldestLocked(func(o *consoleSession) bool { return !o.admin.Load() }) {
				c.endOldestLocked(func(*consoleSession) bool { return true })
			}
		default:
			return protocol.Errorf(protocol.ErrLimitReached, "the console holds %d sessions, of other identities; try again once some end", len(c.sessions))
		}
	}
	c.sessions[sess.id] = sess
	return nil
}

// countLocked counts the sessions of.
func (c *consoleState) countLocked(of func(*consoleSession) bool) int {
	n := 0
	for _, o := range c.sessions {
		if of(o) {
			n++
		}
	}
	return n
}

// endOldestLocked ends the session of that expires first, and reports
// whether there was one.
func (c *consoleState) endOldestLocked(of func(*consoleSession) bool) bool {
	var oldest *consoleSession
	for _, o := range c.sessions {
		if of(o) && (oldest == nil || o.expires.Before(oldest.expires)) {
			oldest = o
		}
	}
	if oldest != nil {
		delete(c.sessions, oldest.id)
	}
	return oldest != nil
}
