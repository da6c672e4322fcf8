package bus

import (
	"net/http"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/protocol"
)

// The console's Messages page reads the message journal through
// endpoints of its own, since the session cookie is no credential for
// /v1/events: the same query, parsed by the same parser
// (parseEventsQuery), paged by the same reader (journal.read), and what
// the session's credential may see decided as for a bearer credential
// (journalAccess). Payloads are left out unless the page asks for them
// (payloads=1), and then only the journal's own, which it keeps only with
// --journal-payloads.

// A ConsoleSession is a console session as the Messages page's
// endpoints need it: they stay in the core, with the journal they read,
// until the journal leaves it (issue 34); the console (bus/console)
// owns the session and checks it before it calls ServeConsoleMessages.
type ConsoleSession struct {
	Credential Credential
	Identity   string
	// Check finds the request's session again, its credential checked
	// anew: a stream calls it on a reload of the bus's auth.
	Check func(r *http.Request) (Credential, error)
}

// ServeConsoleMessages serves the console's Messages page endpoint name
// ("events", "events/stream" or "messages", under the console's api/)
// for sess.
func (s *Server) ServeConsoleMessages(name string, sess *ConsoleSession, w http.ResponseWriter, r *http.Request) {
	switch name {
	case "events":
		s.consoleEvents(sess, w, r)
	case "events/stream":
		s.consoleEventStream(sess, w, r)
	case "messages":
		s.consoleRecent(sess, w, r)
	default:
		writeError(w, http.StatusNotFound, protocol.Errorf(protocol.ErrNotFound, "no console endpoint %q", name))
	}
}

// ConsoleJournal says whether the journal is on, and whether it keeps
// payloads, for the console's session answer.
func (s *Server) ConsoleJournal() (on, payloads bool) {
	return s.journal != nil, s.journal != nil && s.journal.opts.Payloads
}

// consoleJournalQuery reads the Messages page's query: the journal's,
// and payloads. It answers the request itself when it returns false.
func (s *Server) consoleJournalQuery(sess *ConsoleSession, w http.ResponseWriter, r *http.Request, page bool) (eventsRequest, *auth.Authenticator, bool) {
	v := r.URL.Query()
	payloads := v.Has("payloads")
	if payloads && (len(v["payloads"]) != 1 || v.Get("payloads") != "1") {
		writeError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "payloads takes 1 (show them), once"))
		return eventsRequest{}, nil, false
	}
	v.Del("payloads")
	access, a, err := s.journalAccess(sess.Credential.c)
	if err != nil {
		writeError(w, 0, err)
		return eventsRequest{}, nil, false
	}
	req, ok := s.journalQueryOf(w, v, page)
	req.q.setReader(access)
	req.q.hidePayloads = !payloads
	return req, a, ok
}

// consoleEvents answers a page of the journal.
func (s *Server) consoleEvents(sess *ConsoleSession, w http.ResponseWriter, r *http.Request) {
	if req, _, ok := s.consoleJournalQuery(sess, w, r, true); ok {
		s.writeJournalPage(w, &req)
	}
}

// consoleEventStream tails the journal, as /v1/events/stream does. A
// reload of the bus's auth checks the session again, and ends the stream
// when it ended.
func (s *Server) consoleEventStream(sess *ConsoleSession, w http.ResponseWriter, r *http.Request) {
	req, a, ok := s.consoleJournalQuery(sess, w, r, false)
	if !ok {
		return
	}
	release, err := s.takeStream(sess.Identity)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	defer release()
	s.streamJournal(w, r, req, a, func() (*auth.Access, *auth.Authenticator, error) {
		cred, err := sess.Check(r)
		if err != nil {
			return nil, nil, err
		}
		return s.journalAccess(cred.c)
	})
}
