package bus

import (
	"net/http"
)

// Pages of add-ons in the console, while the console is inside bus: the
// journal's Messages page is served by the journal (bus/journal), which
// registers its endpoints here. Interim (issue 34): once the console is
// a package of its own it mounts the journal's handlers itself
// (journal.Journal.SessionEvents and the others), and this file goes.

// ConsolePages are what an add-on adds to the console.
type ConsolePages struct {
	// Session adds fields to the console's session answer
	// (/console/api/session), which the page reads to show what it can.
	Session map[string]any
	// API are endpoints under /console/api/, by name: GET, open to every
	// session, served after the console's own checks (the browser, the
	// session).
	API map[string]http.Handler
}

// AddConsolePages adds p to the console. AddConsolePages may be called
// only from Extend.
func (s *Server) AddConsolePages(p ConsolePages) {
	c := &s.consoleState
	if c.addOnAPI == nil {
		c.addOnAPI, c.addOnSession = make(map[string]http.Handler), make(map[string]any)
	}
	for name, h := range p.API {
		c.addOnAPI[name] = h
	}
	for k, v := range p.Session {
		c.addOnSession[k] = v
	}
}

// ConsoleCredential returns the credential of r's console session,
// checked again against the Authenticator in force.
func (s *Server) ConsoleCredential(r *http.Request) (Credential, error) {
	sess, err := s.consoleSessionOf(r)
	if err != nil {
		return Credential{}, err
	}
	return Credential{sess.cred}, nil
}

// addOnRoute is the route of an add-on's endpoint name, if any.
func (c *consoleState) addOnRoute(name string) (consoleRoute, bool) {
	h, ok := c.addOnAPI[name]
	if !ok {
		return consoleRoute{}, false
	}
	return consoleRoute{http.MethodGet, func(_ *Server, _ *consoleSession, w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }, true}, true
}
