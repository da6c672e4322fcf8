package bus

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// The operator console (docs/OPERATIONS.md, "Operator console"): a few
// static files embedded in the binary, and a JSON API under
// PathConsole+"api/" that they call. A browser logs in with a credential
// once and holds a session cookie after; the cookie is read here and
// nowhere else, so it never authorizes /v1/ or a WebSocket upgrade,
// which take a bearer credential alone. An admin credential opens every
// page; one without admin opens the Messages page alone, read-only,
// which shows what its grant lets it subscribe to: the rest is the whole
// bus's state, which a grant's topic rules do not divide.
const (
	// PathConsole is where the console is served.
	PathConsole = "/console/"
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
	// others are another identity's (consoleSessions.add).
	maxConsoleSessions = 256
	// maxConsoleSessionsPerIdentity bounds one identity's sessions: its
	// next login ends its own oldest, never another identity's.
	maxConsoleSessionsPerIdentity = 8
	// consoleCSP allows the console's own files and nothing else: no
	// inline script or style, no other origin, no framing.
	consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
		"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

//go:embed console
var consoleFiles embed.FS

// consoleStatic serves the embedded files.
var consoleStatic = func() http.Handler {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err)
	}
	return http.StripPrefix(PathConsole, http.FileServer(http.FS(sub)))
}()

// consoleSession is one logged-in browser. The credential stays here, in
// memory, so that every request checks it again against the
// Authenticator in force (a reload that revokes it ends the session) and
// the console can publish as it (BCP decisions).
type consoleSession struct {
	id       string
	csrf     string
	cred     credential
	identity string
	expires  time.Time
	// admin is whether the credential has admin, as of the request's
	// check (a reload may take it away).
	admin atomic.Bool
}

// consoleState is the console's state in a Server: its sessions, and the
// counters' history and the agents it shows (console_data.go).
type consoleState struct {
	mu       sync.Mutex
	sessions map[string]*consoleSession

	// addOnAPI and addOnSession are the add-ons' (console_pages.go).
	addOnAPI     map[string]http.Handler
	addOnSession map[string]any

	sampler sync.Once
	samples sampleRing
	agents  agentBook
	bcp     bcpBook
}

// serveConsole serves everything under PathConsole.
func (s *Server) serveConsole(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	api, isAPI := strings.CutPrefix(r.URL.Path, PathConsole+"api/")
	if !isAPI {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, "GET, HEAD")
			return
		}
		consoleStatic.ServeHTTP(w, r)
		return
	}
	h.Set("Cache-Control", "no-store")
	if err := s.checkBrowser(r); err != nil {
		writeError(w, 0, err)
		return
	}
	if api == "login" {
		s.consoleLogin(w, r)
		return
	}
	sess, err := s.consoleSessionOf(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, err)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		got := r.Header.Get(consoleCSRFHeader)
		if subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
			writeError(w, http.StatusForbidden, protocol.Errorf(protocol.ErrForbidden, "missing or wrong %s header: reload the console", consoleCSRFHeader))
			return
		}
	}
	route, ok := consoleRoutes[api]
	if !ok {
		route, ok = s.consoleState.addOnRoute(api)
	}
	if !ok {
		writeError(w, http.StatusNotFound, protocol.Errorf(protocol.ErrNotFound, "no console endpoint %q", api))
		return
	}
	if r.Method != route.method && !(route.method == http.MethodGet && r.Method == http.MethodHead) {
		methodNotAllowed(w, route.method)
		return
	}
	if !route.anyone && !sess.admin.Load() {
		s.metrics.authRefusals.WithLabelValues(refuseAdmin).Inc()
		writeError(w, http.StatusForbidden, protocol.Errorf(protocol.ErrForbidden,
			"credential %q may not use %s: it needs admin; without it the console shows only the Messages its grant lets it subscribe to", sess.identity, api))
		return
	}
	route.serve(s, sess, w, r)
}

// consoleRoute is one endpoint of the console's API; anyone says a
// session without admin may call it too.
type consoleRoute struct {
	method string
	serve  func(s *Server, sess *consoleSession, w http.ResponseWriter, r *http.Request)
	anyone bool
}

// consoleRoutes are the console's endpoints, under PathConsole+"api/".
// Those open to a session without admin show only what its grant
// allows: the journal, as /v1/events shows it to the same credential.
var consoleRoutes = map[string]consoleRoute{
	"session":            {http.MethodGet, (*Server).consoleWhoAmI, true},
	"logout":             {http.MethodPost, (*Server).consoleLogout, true},
	"stream":             {http.MethodGet, (*Server).consoleStream, false},
	"clients":            {http.MethodGet, (*Server).consoleClients, false},
	"clients/close":      {http.MethodPost, (*Server).consoleCloseClient, false},
	"chain":              {http.MethodGet, (*Server).consoleChain, false},
	"deadletters":        {http.MethodGet, (*Server).consoleDeadLetters, false},
	"deadletters/one":    {http.MethodGet, (*Server).consoleDeadLetter, false},
	"deadletters/count":  {http.MethodGet, (*Server).consoleCountDeadLetters, false},
	"deadletters/replay": {http.MethodPost, (*Server).consoleReplay, false},
	"deadletters/purge":  {http.MethodPost, (*Server).consolePurge, false},
	"approvals":          {http.MethodGet, (*Server).consoleApprovals, false},
	"approvals/decide":   {http.MethodPost, (*Server).consoleDecide, false},
	"agents":             {http.MethodGet, (*Server).consoleAgents, false},
	"bcp":                {http.MethodGet, (*Server).consoleBCP, false},
}

// consoleLogin exchanges a credential for a session: an admin's opens
// every page, another's the Messages page alone. On an open bus no
// credential is needed: any peer may call the dlq.* methods there
// already.
func (s *Server) consoleLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, protocol.Errorf(protocol.ErrParse, "login body must be {\"token\": \"...\"}"))
		return
	}
	now := time.Now()
	if err := s.consoleLoginThrottle.allow("address "+remoteIP(r.RemoteAddr), now); err != nil {
		s.consoleLogins.WithLabelValues(loginThrottled).Inc()
		writeError(w, 0, err)
		return
	}
	cred, _ := bearer(r)
	cred.token = strings.TrimSpace(body.Token)
	identity, expires, admin, err := s.consoleCredential(cred)
	if err != nil {
		s.consoleLogins.WithLabelValues(loginRefused).Inc()
		s.log.Warn("console login refused", "remote", r.RemoteAddr, "err", err)
		writeError(w, 0, err)
		return
	}
	if identity != "" {
		if err := s.consoleLoginThrottle.allow("identity "+identity, now); err != nil {
			s.consoleLogins.WithLabelValues(loginThrottled).Inc()
			writeError(w, 0, err)
			return
		}
	}
	sess := &consoleSession{id: randomHex(32), csrf: randomHex(32), cred: cred, identity: identity, expires: time.Now().Add(consoleSessionLifetime)}
	sess.admin.Store(admin)
	if !expires.IsZero() && expires.Before(sess.expires) {
		sess.expires = expires
	}
	c := &s.consoleState
	c.mu.Lock()
	err = c.addLocked(sess, admin)
	c.mu.Unlock()
	if err != nil {
		s.consoleLogins.WithLabelValues(loginFull).Inc()
		writeError(w, http.StatusServiceUnavailable, err)
		return
	}
	s.consoleLogins.WithLabelValues(loginOK).Inc()
	http.SetCookie(w, &http.Cookie{
		Name: consoleCookie, Value: sess.id, Path: PathConsole, Expires: sess.expires,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	s.log.Info("console login", "remote", r.RemoteAddr, "identity", identity, "admin", admin)
	s.consoleWhoAmI(sess, w, r)
}

// consoleCredential checks that cred is accepted now and returns its
// name, expiry and whether it has admin (everyone has, on an open bus).
func (s *Server) consoleCredential(cred credential) (identity string, expires time.Time, admin bool, err error) {
	a := s.auth.Load()
	if a == nil {
		return "", time.Time{}, true, nil
	}
	p, err := s.authenticate(a, cred)
	if err != nil {
		s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
		return "", time.Time{}, false, protocol.Errorf(protocol.ErrUnauthorized, "credential not accepted")
	}
	return p.Name(), p.Expires(), p.Bind(p.Name()).Admin(), nil
}

// consoleSessionOf returns the request's session, checking its
// credential again.
func (s *Server) consoleSessionOf(r *http.Request) (*consoleSession, error) {
	ck, err := r.Cookie(consoleCookie)
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrUnauthorized, "not logged in to the console")
	}
	c := &s.consoleState
	now := time.Now()
	c.mu.Lock()
	c.dropExpiredLocked(now)
	sess := c.sessions[ck.Value]
	c.mu.Unlock()
	if sess == nil {
		return nil, protocol.Errorf(protocol.ErrUnauthorized, "console session ended; log in again")
	}
	_, _, admin, err := s.consoleCredential(sess.cred)
	if err != nil {
		c.end(sess.id)
		return nil, protocol.Errorf(protocol.ErrUnauthorized, "console session ended: %v", protocol.WireError(err).Message)
	}
	sess.admin.Store(admin)
	return sess, nil
}

// observe notes, for the Agents and BCP pages, the spawner's and the
// gateway's events among the messages this node routes, on either
// publish path (routed).
func (c *consoleState) observe(m *store.Message) {
	c.agents.observe(m)
	c.bcp.observe(m)
}

func (c *consoleState) dropExpiredLocked(now time.Time) {
	for id, sess := range c.sessions {
		if !now.Before(sess.expires) {
			delete(c.sessions, id)
		}
	}
}

func (c *consoleState) end(id string) {
	c.mu.Lock()
	delete(c.sessions, id)
	c.mu.Unlock()
}

// consoleWhoAmI answers the session: who is logged in, its CSRF token,
// and which bus this is.
func (s *Server) consoleWhoAmI(sess *consoleSession, w http.ResponseWriter, _ *http.Request) {
	cluster, node := s.cl.cluster.Names()
	answer := map[string]any{
		"identity": sess.identity, "csrf": sess.csrf, "expires": sess.expires.UTC(), "admin": sess.admin.Load(),
		"serverId": s.opts.ServerID, "cluster": cluster, "node": node, "auth": s.auth.Load() != nil,
	}
	for k, v := range s.consoleState.addOnSession {
		answer[k] = v
	}
	writeJSON(w, http.StatusOK, answer)
}

func (s *Server) consoleLogout(sess *consoleSession, w http.ResponseWriter, r *http.Request) {
	s.consoleState.end(sess.id)
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: PathConsole, MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
