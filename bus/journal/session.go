package journal

import (
	"net/http"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/internal/httpjson"
	"github.com/bub-bus/bub/protocol"
)

// A page that keeps sessions of its own, the console's Messages page,
// reads the journal through handlers made for it here, since its
// session cookie is no credential for /v1/events: the same query, parsed
// by the same parser (parseEventsQuery), paged by the same reader
// (journal.read), and what the session's credential may see decided as
// for a bearer credential (access). Payloads are left out unless the
// page asks for them (payloads=1), and then only the journal's own,
// which it keeps only with --journal-payloads. The page's own router
// checks the method, the browser and the session before them.

// A Session returns the credential the session of r acts with, checked
// again now; an error, a session that ended, ends the request or its
// stream.
type Session func(r *http.Request) (bus.Credential, error)

// sessionQuery reads a session page's query: the journal's, and
// payloads. It answers the request itself when it returns false.
func (jn *Journal) sessionQuery(session Session, w http.ResponseWriter, r *http.Request, page bool) (eventsRequest, reader, bool) {
	v := r.URL.Query()
	payloads := v.Has("payloads")
	if payloads && (len(v["payloads"]) != 1 || v.Get("payloads") != "1") {
		httpjson.WriteError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "payloads takes 1 (show them), once"))
		return eventsRequest{}, reader{}, false
	}
	v.Del("payloads")
	rd, err := jn.sessionReader(session, r)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return eventsRequest{}, reader{}, false
	}
	req, ok := jn.queryOf(w, v, page)
	req.q.setReader(rd.access)
	req.q.hidePayloads = !payloads
	return req, rd, ok
}

// sessionReader decides what r's session sees.
func (jn *Journal) sessionReader(session Session, r *http.Request) (reader, error) {
	cred, err := session(r)
	if err != nil {
		return reader{}, err
	}
	return jn.access(cred)
}

// SessionEvents returns the handler of a page of the journal for a page
// with sessions: PathEvents's query and answer, with payloads=1 to show
// payloads. On a cluster's node the page is the cluster's.
func (jn *Journal) SessionEvents(session Session) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if req, _, ok := jn.sessionQuery(session, w, r, true); ok {
			jn.writePage(w, r, &req)
		}
	})
}

// SessionEventStream returns the handler that tails the journal for a
// page with sessions, as PathEventsStream does. A reload of the bus's
// auth, and each keepalive, asks session again: the stream ends with
// the session.
func (jn *Journal) SessionEventStream(session Session) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, rd, ok := jn.sessionQuery(session, w, r, false)
		if !ok {
			return
		}
		jn.stream(w, r, req, rd, func() (reader, error) { return jn.sessionReader(session, r) })
	})
}

// SessionMessages returns the handler of the Messages page's list: the
// newest messages the session may see that the query (topic, since,
// until, correlationId) matches, newest first, up to limit, each with
// its outcome (recent.go), as {"messages": [...], "node": ...}. On a
// cluster's node they are this node's: each node journals what it
// accepted and delivered.
func (jn *Journal) SessionMessages(session Session) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _, ok := jn.sessionQuery(session, w, r, false)
		if !ok {
			return
		}
		rows := jn.j.recentMessages(req.limit, &req.q)
		if rows == nil {
			rows = []consoleMessage{}
		}
		httpjson.Write(w, http.StatusOK, map[string]any{"messages": rows, "node": jn.s.Status().Node})
	})
}
