package journal

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/internal/httpjson"
	"github.com/bub-bus/bub/protocol"
)

// The message journal over HTTP (docs/PROTOCOL.md, "Message journal"):
// a page of events, and a Server-Sent Events stream of them. Both take
// the credential POST /v1/messages does, and show a reader only the
// events of topics its grant lets it subscribe to; an admin sees all.
const (
	// PathEvents answers a page of journal events.
	PathEvents = "/v1/events"
	// PathEventsStream streams journal events as Server-Sent Events.
	PathEventsStream = "/v1/events/stream"
)

const (
	// defaultEventsLimit and maxEventsLimit bound a page (limit=).
	defaultEventsLimit = 100
	maxEventsLimit     = 1000
	// maxCorrelationID bounds correlationId=, as message ids are short.
	maxCorrelationID = 256
	// streamKeepalive is how often an idle stream sends a comment, so
	// that proxies and the reader see it is alive.
	streamKeepalive = 15 * time.Second
	// streamRetryMS is the reconnect delay a stream asks EventSource for.
	streamRetryMS = 2000
)

// maxReaderTopics bounds the topics a reader's grant decisions are
// remembered for; beyond it they are forgotten all at once.
const maxReaderTopics = 4096

// eventsRequest is a parsed query of the journal.
type eventsRequest struct {
	after    uint64
	hasAfter bool
	limit    int
	q        journalQuery
	// cluster, for a page on a cluster's node, is what the other nodes
	// are asked; nil otherwise.
	cluster *clusterSearch
}

// journalKinds are the kinds an event may have, for kind=.
var journalKinds = []string{
	protocol.JournalAccepted, protocol.JournalRouted, protocol.JournalDelivery, protocol.JournalRetryScheduled,
	protocol.JournalHeld, protocol.JournalWoken, protocol.JournalDeadLettered, protocol.JournalReplayed, protocol.JournalPurged,
}

// parseEventsQuery reads the query string of PathEvents and
// PathEventsStream (and of the console's Messages page, which takes the
// same): messageId, correlationId, kind, topic (a pattern), since and
// until (RFC 3339 or a duration ago), after (a cursor) and limit. A
// parameter it does not know is refused, so that a typo does not widen
// the query.
func (j *journal) parseEventsQuery(v url.Values, now time.Time) (eventsRequest, error) {
	req := eventsRequest{limit: defaultEventsLimit}
	for name, vals := range v {
		if len(vals) != 1 {
			return req, fmt.Errorf("query parameter %s is given %d times; give it once", name, len(vals))
		}
		val := vals[0]
		switch name {
		case "messageId", "correlationId":
			if val == "" || len(val) > maxCorrelationID {
				return req, fmt.Errorf("%s must be a message id of 1 to %d bytes", name, maxCorrelationID)
			}
			if name == "messageId" {
				req.q.messageID = val
			} else {
				req.q.correlationID = val
			}
		case "kind":
			if !slices.Contains(journalKinds, val) {
				return req, fmt.Errorf("kind %q is not one of %s", val, strings.Join(journalKinds, ", "))
			}
			req.q.kind = val
		case "topic":
			p, err := protocol.ParsePattern(val)
			if err != nil {
				return req, fmt.Errorf("topic: %v", err)
			}
			req.q.topic = p
		case "since", "until":
			t, err := parseSince(val, now)
			if err != nil {
				return req, fmt.Errorf("%s: %v", name, err)
			}
			if name == "since" {
				req.q.since = t
			} else {
				req.q.until = t
			}
		case "after":
			seq, err := j.parseCursor(val)
			if err != nil {
				return req, fmt.Errorf("after: %v", err)
			}
			req.after, req.hasAfter = seq, true
		case "limit":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > maxEventsLimit {
				return req, fmt.Errorf("limit %q is not a number from 1 to %d", val, maxEventsLimit)
			}
			req.limit = n
		default:
			return req, fmt.Errorf("unknown query parameter %q; the journal takes messageId, correlationId, kind, topic, since, until, after and limit", name)
		}
	}
	if !req.q.until.IsZero() && req.q.until.Before(req.q.since) {
		return req, fmt.Errorf("until %s is before since %s", req.q.until.Format(time.RFC3339Nano), req.q.since.Format(time.RFC3339Nano))
	}
	return req, nil
}

// parseSince reads since= and until=: an RFC 3339 time, or a Go duration
// meaning that long before now (since=15m).
func parseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a positive duration ago (15m)", v)
	}
	return now.Add(-d), nil
}

// reader is who reads the journal, as decided from its credential.
type reader struct {
	// access is what it may subscribe to, which is what it sees: nil
	// for everything (an admin, or an open bus).
	access *auth.Access
	// authn is the Authenticator that decided, nil on an open bus: a
	// stream decides again once the bus's is another.
	authn *auth.Authenticator
	// identity is the credential's name, "" on an open bus: its streams
	// count against its cap.
	identity string
}

// readerOf authenticates the reader of r as POST /v1/messages does and
// decides what it sees.
func (jn *Journal) readerOf(r *http.Request) (reader, error) {
	cred, err := jn.s.RequestCredential(r)
	if err != nil {
		return reader{}, err
	}
	return jn.access(cred)
}

// access decides what cred may see of the journal: everything for an
// admin or on an open bus, else what its grant lets it subscribe to. The
// console decides so for its session's credential, so that its Messages
// page obeys the grant rules /v1/events does.
func (jn *Journal) access(cred bus.Credential) (reader, error) {
	authn := jn.s.Auth()
	p, err := jn.s.Verify(cred)
	if err != nil || p == nil {
		return reader{}, err
	}
	rd := reader{authn: authn, identity: p.Name()}
	if access := p.Bind(p.Name()); !access.Admin() {
		rd.access = access
	}
	return rd, nil
}

// setReader makes q show only what access may subscribe to; nil shows
// everything. A topic is a pattern that matches itself only: the reader
// sees it if it could subscribe to it.
func (q *journalQuery) setReader(access *auth.Access) {
	q.reader, q.may = access, nil
	if access == nil {
		return
	}
	seen := make(map[string]bool)
	q.may = func(topic string) bool {
		may, ok := seen[topic]
		if !ok {
			p, err := protocol.ParsePattern(topic)
			may = err == nil && access.CanSubscribe(p)
			if len(seen) >= maxReaderTopics {
				clear(seen)
			}
			seen[topic] = may
		}
		return may
	}
}

// request checks a request of the journal: the method, the journal being
// on, the reader and the query, of a page or of a stream (queryOf). It
// answers the request itself when it returns false.
func (jn *Journal) request(w http.ResponseWriter, r *http.Request, page bool) (eventsRequest, reader, bool) {
	if r.Method != http.MethodGet {
		httpjson.MethodNotAllowed(w, http.MethodGet)
		return eventsRequest{}, reader{}, false
	}
	rd, err := jn.readerOf(r)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return eventsRequest{}, reader{}, false
	}
	req, ok := jn.queryOf(w, r.URL.Query(), page)
	req.q.setReader(rd.access)
	return req, rd, ok
}

// errOff answers a request of a journal that is off.
var errOff = protocol.Errorf(protocol.ErrMethodNotFound, "the message journal is off on this bus (--journal=false)")

// queryOf checks that the journal is on and parses the query. A page
// (not a stream) of a cluster's node searches every node: its cursor is
// the cluster's (cluster.go), and the query is kept for the other nodes.
// It answers the request itself when it returns false.
func (jn *Journal) queryOf(w http.ResponseWriter, v url.Values, page bool) (eventsRequest, bool) {
	if jn.j == nil {
		httpjson.WriteError(w, http.StatusNotFound, errOff)
		return eventsRequest{}, false
	}
	var (
		req     eventsRequest
		cursors nodeCursors
		err     error
	)
	now := time.Now()
	if page && jn.s.Status().Node != "" {
		after := v["after"]
		v.Del("after")
		req, err = jn.j.parseEventsQuery(v, now)
		switch {
		case err != nil:
		case len(after) > 1:
			err = fmt.Errorf("query parameter after is given %d times; give it once", len(after))
		case len(after) == 1:
			if cursors, err = parseNodeCursors(after[0]); err != nil {
				err = fmt.Errorf("after: %v", err)
			}
		}
		req.cluster = &clusterSearch{cursors: cursors, query: absoluteTimes(v, &req.q)}
	} else {
		req, err = jn.j.parseEventsQuery(v, now)
	}
	if err != nil {
		httpjson.WriteError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "%v", err))
		return eventsRequest{}, false
	}
	return req, true
}

// serveEvents answers a page of the journal.
func (jn *Journal) serveEvents(w http.ResponseWriter, r *http.Request) {
	req, _, ok := jn.request(w, r, true)
	if !ok {
		return
	}
	jn.writePage(w, r, &req)
}

// writePage answers the page of the journal req asks for.
func (jn *Journal) writePage(w http.ResponseWriter, r *http.Request, req *eventsRequest) {
	if req.cluster != nil {
		page, err := jn.clusterPage(r.Context(), req)
		if err != nil {
			httpjson.WriteError(w, 0, err)
			return
		}
		httpjson.Write(w, http.StatusOK, page)
		return
	}
	j := jn.j
	events, last, more, gap := j.read(req.after, req.limit, &req.q)
	page := protocol.JournalPage{Events: events, Next: j.cursor(last), More: more, Gap: gap}
	if page.Events == nil {
		page.Events = []protocol.JournalEvent{}
	}
	httpjson.Write(w, http.StatusOK, page)
}

// serveEventStream streams the journal as Server-Sent Events (see
// stream) to a reader with a bearer credential.
func (jn *Journal) serveEventStream(w http.ResponseWriter, r *http.Request) {
	req, rd, ok := jn.request(w, r, false)
	if !ok {
		return
	}
	jn.stream(w, r, req, rd, func() (reader, error) { return jn.readerOf(r) })
}

// stream streams the journal as Server-Sent Events: each event with its
// cursor as id, from the one after Last-Event-ID (or after=), else from
// since=, else from now on. A reader that reconnects with the last id it
// got misses nothing the journal still holds. The stream counts against
// its reader's cap on streams, and ends when the bus shuts down, or when
// the reader is no longer accepted: again decides what it sees at each
// reload of the bus's auth and each keepalive.
func (jn *Journal) stream(w http.ResponseWriter, r *http.Request, req eventsRequest, rd reader, again func() (reader, error)) {
	release, err := jn.s.TakeStream(rd.identity)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	defer release()
	j := jn.j
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		seq, err := j.parseCursor(id)
		if err != nil {
			httpjson.WriteError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "Last-Event-ID: %v", err))
			return
		}
		req.after, req.hasAfter = seq, true
	}
	if !req.hasAfter && req.q.since.IsZero() {
		j.mu.Lock()
		req.after = j.next - 1
		j.mu.Unlock()
	}
	rc := http.NewResponseController(w)
	// A stream outlives the server's read timeout, which would otherwise
	// end it: there is nothing more to read.
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(jn.writeTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte("retry: " + strconv.Itoa(streamRetryMS) + "\n\n")) {
		return
	}
	keepalive := time.NewTicker(streamKeepalive)
	defer keepalive.Stop()
	var buf []byte
	recheck := false
	for {
		if now := jn.s.Auth(); now != rd.authn || recheck {
			// Reloaded, or a keepalive's time: the reader is decided
			// again, so that a grant changed, a credential that expired
			// or a console session that ended stops what it sees.
			recheck = false
			if rd, err = again(); err != nil {
				return
			}
			req.q.setReader(rd.access)
		}
		events, last, more, gap := j.read(req.after, maxEventsLimit, &req.q)
		buf = buf[:0]
		if gap {
			buf = append(buf, ": events after the last id were dropped by retention; going on from the oldest kept\n\n"...)
		}
		for i := range events {
			data, _ := json.Marshal(&events[i])
			buf = append(buf, "id: "...)
			buf = append(buf, events[i].Cursor...)
			buf = append(buf, "\ndata: "...)
			buf = append(buf, data...)
			buf = append(buf, "\n\n"...)
		}
		req.after = last
		if len(buf) > 0 && !write(buf) {
			return
		}
		if more {
			continue
		}
		wake := j.waitFor(last)
		if wake == nil {
			continue
		}
		select {
		case <-wake:
		case <-keepalive.C:
			if !write([]byte(": keepalive\n\n")) {
				return
			}
			recheck = true
		case <-r.Context().Done():
			return
		case <-j.closed:
			return
		}
	}
}
