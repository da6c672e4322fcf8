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
	"time"

	"github.com/bub-bus/bub/protocol"
)

// The operator console (docs/OPERATIONS.md, "Operator console"): a few
// static files embedded in the binary, and a JSON API under
// PathConsole+"api/" that they call. A browser logs in with an admin
// credential once and holds a session cookie after; the cookie is read
// here and nowhere else, so it never authorizes /v1/ or a WebSocket
// upgrade, which take a bearer credential alone.
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
	// maxConsoleSessions bounds the sessions kept; a login beyond it
	// ends the oldest.
	maxConsoleSessions = 256
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
}

// consoleState is the console's state in a Server: its sessions, and the
// counters' history and the agents it shows (console_data.go).
type consoleState struct {
	mu       sync.Mutex
	sessions map[string]*consoleSession

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
		writeError(w, http.StatusNotFound, protocol.Errorf(protocol.ErrNotFound, "no console endpoint %q", api))
		return
	}
	if r.Method != route.method && !(route.method == http.MethodGet && r.Method == http.MethodHead) {
		methodNotAllowed(w, route.method)
		return
	}
	route.serve(s, sess, w, r)
}

// consoleRoute is one endpoint of the console's API.
type consoleRoute struct {
	method string
	serve  func(s *Server, sess *consoleSession, w http.ResponseWriter, r *http.Request)
}

// consoleRoutes are the console's endpoints, under PathConsole+"api/".
var consoleRoutes = map[string]consoleRoute{
	"session":            {http.MethodGet, (*Server).consoleWhoAmI},
	"logout":             {http.MethodPost, (*Server).consoleLogout},
	"stream":             {http.MethodGet, (*Server).consoleStream},
	"clients":            {http.MethodGet, (*Server).consoleClients},
	"clients/close":      {http.MethodPost, (*Server).consoleCloseClient},
	"chain":              {http.MethodGet, (*Server).consoleChain},
	"deadletters":        {http.MethodGet, (*Server).consoleDeadLetters},
	"deadletters/one":    {http.MethodGet, (*Server).consoleDeadLetter},
	"deadletters/count":  {http.MethodGet, (*Server).consoleCountDeadLetters},
	"deadletters/replay": {http.MethodPost, (*Server).consoleReplay},
	"deadletters/purge":  {http.MethodPost, (*Server).consolePurge},
	"approvals":          {http.MethodGet, (*Server).consoleApprovals},
	"approvals/decide":   {http.MethodPost, (*Server).consoleDecide},
	"agents":             {http.MethodGet, (*Server).consoleAgents},
	"events":             {http.MethodGet, (*Server).consoleEvents},
	"events/stream":      {http.MethodGet, (*Server).consoleEventStream},
	"bcp":                {http.MethodGet, (*Server).consoleBCP},
}

// consoleLogin exchanges an admin credential for a session. On an open
// bus no credential is needed: any peer may call the dlq.* methods
// there already.
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
	cred, _ := bearer(r)
	cred.token = strings.TrimSpace(body.Token)
	identity, expires, err := s.consoleAdmin(cred)
	if err != nil {
		s.log.Warn("console login refused", "remote", r.RemoteAddr, "err", err)
		writeError(w, 0, err)
		return
	}
	sess := &consoleSession{id: randomHex(32), csrf: randomHex(32), cred: cred, identity: identity, expires: time.Now().Add(consoleSessionLifetime)}
	if !expires.IsZero() && expires.Before(sess.expires) {
		sess.expires = expires
	}
	c := &s.consoleState
	c.mu.Lock()
	if c.sessions == nil {
		c.sessions = make(map[string]*consoleSession)
	}
	c.dropExpiredLocked(time.Now())
	if len(c.sessions) >= maxConsoleSessions {
		var oldest *consoleSession
		for _, o := range c.sessions {
			if oldest == nil || o.expires.Before(oldest.expires) {
				oldest = o
			}
		}
		delete(c.sessions, oldest.id)
	}
	c.sessions[sess.id] = sess
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: consoleCookie, Value: sess.id, Path: PathConsole, Expires: sess.expires,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	s.log.Info("console login", "remote", r.RemoteAddr, "identity", identity)
	s.consoleWhoAmI(sess, w, r)
}

// consoleAdmin checks that cred is an admin credential now and returns
// its name and expiry. A credential without admin gets no console:
// everything it shows is the bus's whole state (every client, every
// dead letter), which a grant's topic rules do not divide.
func (s *Server) consoleAdmin(cred credential) (identity string, expires time.Time, err error) {
	a := s.auth.Load()
	if a == nil {
		return "", time.Time{}, nil
	}
	p, err := s.authenticate(a, cred)
	if err != nil {
		s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
		return "", time.Time{}, protocol.Errorf(protocol.ErrUnauthorized, "credential not accepted")
	}
	if !p.Bind(p.Name()).Admin() {
		s.metrics.authRefusals.WithLabelValues(refuseAdmin).Inc()
		return "", time.Time{}, protocol.Errorf(protocol.ErrForbidden, "credential %q may not use the console: it needs admin", p.Name())
	}
	return p.Name(), p.Expires(), nil
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
	if _, _, err := s.consoleAdmin(sess.cred); err != nil {
		c.end(sess.id)
		return nil, protocol.Errorf(protocol.ErrUnauthorized, "console session ended: %v", protocol.WireError(err).Message)
	}
	return sess, nil
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
	writeJSON(w, http.StatusOK, map[string]any{
		"identity": sess.identity, "csrf": sess.csrf, "expires": sess.expires.UTC(),
		"serverId": s.opts.ServerID, "cluster": cluster, "node": node, "auth": s.auth.Load() != nil,
		"journal": s.journal != nil, "journalPayloads": s.journal != nil && s.journal.opts.Payloads,
	})
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
