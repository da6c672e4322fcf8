package bus

import (
	"bytes"
	"errors"
	"net/http"
	"strings"

	"github.com/bub-bus/bub/protocol"
)

// PathCallbacks starts the path a tool posts a subscription's events to:
// POST /v1/callbacks/{id} (toolsub.go; docs/PROTOCOL.md, "Tool
// subscriptions").
const PathCallbacks = protocol.PathCallbacks

// serveCallback takes a subscription_event a tool posts to its callback.
// The id in the path is the credential: no Authorization is needed, and
// one that is no active subscription's is 404. Answers: 200 with the
// outcome (delivered, or orphaned: its thread has nobody, logged and
// discarded), 400 naming the field at fault, 404, 405, 413, 429 with
// Retry-After over the subscription's rate, 503 while the bus drains.
func (s *Server) serveCallback(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, PathCallbacks)
	if id == "" || strings.Contains(id, "/") {
		s.toolSubs.events.WithLabelValues(toolEventUnknown).Inc()
		writeError(w, http.StatusNotFound, protocol.Errorf(protocol.ErrNotFound, "no such callback: the path is %s{id}", PathCallbacks))
		return
	}
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	if err := s.checkBrowser(r); err != nil {
		writeError(w, 0, err)
		return
	}
	// The body's checks are the event parser's
	// (protocol.ParseSubscriptionEvent), which names the field at fault.
	var body bytes.Buffer
	if _, err := body.ReadFrom(http.MaxBytesReader(w, r.Body, s.opts.MaxMessageBytes)); err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			writeError(w, http.StatusRequestEntityTooLarge, protocol.Errorf(protocol.ErrLimitReached, "body is more than %d bytes (--max-message-bytes)", s.opts.MaxMessageBytes))
			return
		}
		writeError(w, 0, protocol.Errorf(protocol.ErrParse, "read body: %v", err))
		return
	}
	answer, err := s.toolEvent(id, body.Bytes())
	switch {
	case protocol.CodeOf(err) == protocol.CodeNotFound:
		writeError(w, http.StatusNotFound, err)
	case err != nil:
		writeError(w, 0, err)
	default:
		writeJSON(w, http.StatusOK, answer)
	}
}
