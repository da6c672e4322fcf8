package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/internal/httpjson"
	"github.com/bub-bus/bub/protocol"
)

// The operator console (docs/OPERATIONS.md, "Operator console"): a few
// static files embedded in the binary, and a JSON API under
// Path+"api/" that they call. A browser logs in with a credential
// once and holds a session cookie after; the cookie is read here and
// nowhere else, so it never authorizes /v1/ or a WebSocket upgrade,
// which take a bearer credential alone. An admin credential opens every
// page; one without admin opens the Messages page alone, read-only,
// which shows what its grant lets it subscribe to: the rest is the whole
// bus's state, which a grant's topic rules do not divide.
const (
	// Path is where the console is served.
	Path = "/console/"
	// consoleCookie names the session cookie.
	consoleCookie = "bub_console"
	// consoleCSRFHeader carries a session's CSRF token on every request
	// that changes state.
	consoleCSRFHeader = "X-Bub-CSRF"
	// consoleSessionLifetime is how long a session lasts, at most: an
	// operator logs in again after it, and a stolen cookie is worth that
	// long at most. The credential's own expiry ends it sooner.
	consoleSessionLifetime = 30 * time.Minute
	// maxConsoleSessions bounds the sessions kept. A login beyond it
	// ends its own identity's oldest, else, for an admin, the oldest
	// session without admin; a login without admin is refused when the
	// others are another identity's (sessions.addLocked).
	maxConsoleSessions = 256
	// maxConsoleSessionsPerIdentity bounds one identity's sessions: its
	// next login ends its own oldest, never another identity's.
	maxConsoleSessionsPerIdentity = 8
	// consoleCSP allows the console's own files and nothing else: no
	// inline script or style, no other origin, no framing.
	consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
		"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

//go:embed index.html console.css console.js
var files embed.FS

// static serves the embedded files.
var static = http.StripPrefix(Path, http.FileServer(http.FS(files)))

// Extension is the console, as an add-on of a bus.Server: put it in
// bus.Options.Extensions. It serves Path (a request for the path
// without its slash is redirected) and hears, as an observer, the
// spawner's and the BCP gateway's events among the messages the node
// routes.
type Extension struct {
	// Journal is the message journal the Messages page reads: the one
	// in the same Options.Extensions, before the console. Nil: the page
	// says the journal is off.
	Journal *journal.Journal
}

// Extend adds the console to s, with a state of its own: one Extension
// may serve several servers (a cluster's nodes in a test).
func (e Extension) Extend(s *bus.Server) error {
	ctx, cancel := context.WithCancel(context.Background())
	c := &console{bus: s, log: s.Options().Logger, ctx: ctx, logins: newLoginMetric(s.Registry()), journal: e.Journal}
	s.OnShutdown(func(context.Context) { cancel() })
	s.Observe(c)
	if err := s.Handle(Path, c); err != nil {
		return err
	}
	return nil
}

// session is one logged-in browser. The credential stays here, in
// memory, so that every request checks it again against the
// Authenticator in force (a reload that revokes it ends the session) and
// the console can publish as it (BCP decisions).
type session struct {
	id       string
	csrf     string
	cred     bus.Credential
	identity string
	expires  time.Time
	// admin is whether the credential has admin, as of the request's
	// check (a reload may take it away).
	admin atomic.Bool
}

// console is the console of one Server: its sessions, the counters'
// history and the agents and BCP events it shows.
type console struct {
	bus *bus.Server
	log *slog.Logger
	// journal is what the Messages page reads; nil when off.
	journal *journal.Journal
	// ctx ends as the Server shuts down, and with it the sampler and
	// the streams.
	ctx context.Context

	// logins counts logins by outcome, and throttle throttles them
	// (login.go).
	logins   *prometheus.CounterVec
	throttle loginThrottle

	sessions sessions
	sampler  sync.Once
	samples  sampleRing
	agents   agentBook
	bcp      bcpBook
}

// sessions is the logged-in browsers, by session id.
type sessions struct {
	mu  sync.Mutex
	all map[string]*session
}

// ServeHTTP serves everything under Path.
func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	api, isAPI := strings.CutPrefix(r.URL.Path, Path+"api/")
	if !isAPI {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			httpjson.MethodNotAllowed(w, "GET, HEAD")
			return
		}
		static.ServeHTTP(w, r)
		return
	}
	h.Set("Cache-Control", "no-store")
	if err := c.bus.CheckBrowser(r); err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	if api == "login" {
		c.login(w, r)
		return
	}
	sess, err := c.sessionOf(r)
	if err != nil {
		httpjson.WriteError(w, http.StatusUnauthorized, err)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		got := r.Header.Get(consoleCSRFHeader)
		if subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
			httpjson.WriteError(w, http.StatusForbidden, protocol.Errorf(protocol.ErrForbidden, "missing or wrong %s header: reload the console", consoleCSRFHeader))
			return
		}
	}
	route, ok := routes[api]
	if !ok {
		httpjson.WriteError(w, http.StatusNotFound, protocol.Errorf(protocol.ErrNotFound, "no console endpoint %q", api))
		return
	}
	if r.Method != route.method && !(route.method == http.MethodGet && r.Method == http.MethodHead) {
		httpjson.MethodNotAllowed(w, route.method)
		return
	}
	if !route.anyone && !sess.admin.Load() {
		c.bus.RefusedAdmin()
		httpjson.WriteError(w, http.StatusForbidden, protocol.Errorf(protocol.ErrForbidden,
			"credential %q may not use %s: it needs admin; without it the console shows only the Messages its grant lets it subscribe to", sess.identity, api))
		return
	}
	if route.serve == nil {
		c.messagesPage(api).ServeHTTP(w, r)
		return
	}
	route.serve(c, sess, w, r)
}

// messagesPage is the handler of the Messages page's endpoint api, the
// journal's, with the session's credential checked again at every
// request and, in a stream, at every reload.
func (c *console) messagesPage(api string) http.Handler {
	if c.journal == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			httpjson.WriteError(w, http.StatusNotFound, protocol.Errorf(protocol.ErrMethodNotFound, "the message journal is off on this bus (--journal=false)"))
		})
	}
	switch api {
	case "events":
		return c.journal.SessionEvents(c.credentialOf)
	case "events/stream":
		return c.journal.SessionEventStream(c.credentialOf)
	}
	return c.journal.SessionMessages(c.credentialOf)
}

// route is one endpoint of the console's API; anyone says a session
// without admin may call it too. A nil serve is a Messages page
// endpoint, which the journal serves (messagesPage).
type route struct {
	method string
	serve  func(c *console, sess *session, w http.ResponseWriter, r *http.Request)
	anyone bool
}

// routes are the console's endpoints, under Path+"api/". Those open to
// a session without admin show only what its grant allows: the journal,
// as /v1/events shows it to the same credential.
var routes = map[string]route{
	"session":            {http.MethodGet, (*console).whoAmI, true},
	"logout":             {http.MethodPost, (*console).logout, true},
	"events":             {http.MethodGet, nil, true},
	"events/stream":      {http.MethodGet, nil, true},
	"messages":           {http.MethodGet, nil, true},
	"stream":             {http.MethodGet, (*console).stream, false},
	"clients":            {http.MethodGet, (*console).clients, false},
	"clients/close":      {http.MethodPost, (*console).closeClient, false},
	"chain":              {http.MethodGet, (*console).chain, false},
	"deadletters":        {http.MethodGet, (*console).deadLetters, false},
	"deadletters/one":    {http.MethodGet, (*console).deadLetter, false},
	"deadletters/count":  {http.MethodGet, (*console).countDeadLetters, false},
	"deadletters/replay": {http.MethodPost, (*console).replay, false},
	"deadletters/purge":  {http.MethodPost, (*console).purge, false},
	"approvals":          {http.MethodGet, (*console).approvals, false},
	"approvals/decide":   {http.MethodPost, (*console).decide, false},
	"agents":             {http.MethodGet, (*console).agentList, false},
	"bcp":                {http.MethodGet, (*console).bcpPage, false},
}

// login exchanges a credential for a session: an admin's opens every
// page, another's the Messages page alone. On an open bus no credential
// is needed: any peer may call the dlq.* methods there already.
func (c *console) login(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		httpjson.MethodNotAllowed(w, http.MethodPost)
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, protocol.Errorf(protocol.ErrParse, "login body must be {\"token\": \"...\"}"))
		return
	}
	now := time.Now()
	if err := c.throttle.allow("address "+remoteIP(r.RemoteAddr), now); err != nil {
		c.logins.WithLabelValues(loginThrottled).Inc()
		httpjson.WriteError(w, 0, err)
		return
	}
	cred := bus.CredentialOf(r, strings.TrimSpace(body.Token))
	identity, expires, admin, err := c.check(cred)
	if err != nil {
		c.logins.WithLabelValues(loginRefused).Inc()
		c.log.Warn("console login refused", "remote", r.RemoteAddr, "err", err)
		httpjson.WriteError(w, 0, err)
		return
	}
	if identity != "" {
		if err := c.throttle.allow("identity "+identity, now); err != nil {
			c.logins.WithLabelValues(loginThrottled).Inc()
			httpjson.WriteError(w, 0, err)
			return
		}
	}
	sess := &session{id: randomHex(32), csrf: randomHex(32), cred: cred, identity: identity, expires: time.Now().Add(consoleSessionLifetime)}
	sess.admin.Store(admin)
	if !expires.IsZero() && expires.Before(sess.expires) {
		sess.expires = expires
	}
	c.sessions.mu.Lock()
	err = c.sessions.addLocked(sess, admin)
	c.sessions.mu.Unlock()
	if err != nil {
		c.logins.WithLabelValues(loginFull).Inc()
		httpjson.WriteError(w, http.StatusServiceUnavailable, err)
		return
	}
	c.logins.WithLabelValues(loginOK).Inc()
	http.SetCookie(w, &http.Cookie{
		Name: consoleCookie, Value: sess.id, Path: Path, Expires: sess.expires,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	c.log.Info("console login", "remote", r.RemoteAddr, "identity", identity, "admin", admin)
	c.whoAmI(sess, w, r)
}

// check checks that cred is accepted now and returns its name, expiry
// and whether it has admin (everyone has, on an open bus).
func (c *console) check(cred bus.Credential) (identity string, expires time.Time, admin bool, err error) {
	p, err := c.bus.Verify(cred)
	if err != nil {
		// Verify's error says which header to send; a login sends none.
		return "", time.Time{}, false, protocol.Errorf(protocol.ErrUnauthorized, "credential not accepted")
	}
	if p == nil {
		return "", time.Time{}, true, nil
	}
	return p.Name(), p.Expires(), p.Bind(p.Name()).Admin(), nil
}

// sessionOf returns the request's session, checking its credential
// again.
func (c *console) sessionOf(r *http.Request) (*session, error) {
	ck, err := r.Cookie(consoleCookie)
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrUnauthorized, "not logged in to the console")
	}
	now := time.Now()
	c.sessions.mu.Lock()
	c.sessions.dropExpiredLocked(now)
	sess := c.sessions.all[ck.Value]
	c.sessions.mu.Unlock()
	if sess == nil {
		return nil, protocol.Errorf(protocol.ErrUnauthorized, "console session ended; log in again")
	}
	_, _, admin, err := c.check(sess.cred)
	if err != nil {
		c.sessions.end(sess.id)
		return nil, protocol.Errorf(protocol.ErrUnauthorized, "console session ended: %v", protocol.WireError(err).Message)
	}
	sess.admin.Store(admin)
	return sess, nil
}

// credentialOf is the credential of the request's session, checked
// again: what the journal's Messages endpoints check a stream by.
func (c *console) credentialOf(r *http.Request) (bus.Credential, error) {
	sess, err := c.sessionOf(r)
	if err != nil {
		return bus.Credential{}, err
	}
	return sess.cred, nil
}

// Observe notes, for the Agents and BCP pages, the spawner's and the
// gateway's events among the messages this node routes, on either
// publish path: routed, or routed once woken from a hold.
func (c *console) Observe(ev bus.Event) {
	if ev.Message == nil || (ev.Kind != protocol.JournalRouted && ev.Kind != protocol.JournalWoken) {
		return
	}
	c.agents.observe(ev.Message)
	c.bcp.observe(ev.Message)
}

func (t *sessions) dropExpiredLocked(now time.Time) {
	for id, sess := range t.all {
		if !now.Before(sess.expires) {
			delete(t.all, id)
		}
	}
}

func (t *sessions) end(id string) {
	t.mu.Lock()
	delete(t.all, id)
	t.mu.Unlock()
}

// whoAmI answers the session: who is logged in, its CSRF token, and
// which bus this is.
func (c *console) whoAmI(sess *session, w http.ResponseWriter, _ *http.Request) {
	st := c.bus.Status()
	journal, payloads := c.journal != nil && c.journal.On(), c.journal != nil && c.journal.Payloads()
	httpjson.Write(w, http.StatusOK, map[string]any{
		"identity": sess.identity, "csrf": sess.csrf, "expires": sess.expires.UTC(), "admin": sess.admin.Load(),
		"serverId": st.ServerID, "cluster": st.Cluster, "node": st.Node, "auth": st.Auth,
		"journal": journal, "journalPayloads": payloads,
	})
}

func (c *console) logout(sess *session, w http.ResponseWriter, r *http.Request) {
	c.sessions.end(sess.id)
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: Path, MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	httpjson.Write(w, http.StatusOK, map[string]bool{"ok": true})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
