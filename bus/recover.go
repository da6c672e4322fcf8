package bus

import (
	"runtime/debug"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// Where a recovered panic happened: the values of bub_panics_total's
// "where" label.
const (
	panicRequest = "request"
	panicAttempt = "retry_attempt"
	panicMetrics = "metrics_scrape"
)

// guard runs a request's handler so that a panic in it, whether a bug of
// the bus or a bbolt assertion on a damaged store, answers this request
// with -32603 instead of killing the process with every peer on it. It
// also turns memory faults (a SIGBUS from a store file shrunk under the
// bus's mmap) into panics on this goroutine: Go cannot recover a fault
// otherwise. Open's checks are the first line of defence against a
// damaged file; this is the second, for damage done while the bus runs.
//
// The sections a handler runs under a lock release it by defer (doc.go),
// so the bus goes on after a recovered panic; the recovery itself takes
// no lock all the same.
func (c *conn) guard(req *rpcstream.Request, handler func(*rpcstream.Request) (any, error)) (result any, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			result, err = nil, c.panicked(req, r)
		}
	}()
	return handler(req)
}

// panicked logs and counts a panic r in the handling of req, and returns
// the error req is answered with.
func (c *conn) panicked(req *rpcstream.Request, r any) error {
	c.server.metrics.panics.WithLabelValues(panicRequest).Inc()
	c.log.Error("request handler panicked; answered internal error", "method", c.server.methodLabel(req.Method),
		"panic", r, "stack", string(debug.Stack()))
	return protocol.Errorf(protocol.ErrInternal, "%s failed inside the bus; its log has the details", c.server.methodLabel(req.Method))
}

// errPanicked is the outcome of a delivery the bus panicked in: a
// failure, retried as any other, that says nothing of the subscriber.
var errPanicked error = &deliveryError{failError, "the delivery failed inside the bus; its log has the details"}

// deliveryPanicked logs and counts a panic p in the delivery d, and
// returns the outcome it is recorded with, errPanicked. Both ways of
// making a delivery record a panic so: through the pipeline
// (deliverInTurn) and by the call a walk writes itself (walk.go).
func (s *Server) deliveryPanicked(d *delivery, p any) error {
	s.metrics.panics.WithLabelValues(panicRequest).Inc()
	s.log.Error("delivery panicked; recorded as failed", "message_id", d.Message.ID, "client", d.ClientID,
		"panic", p, "stack", string(debug.Stack()))
	return errPanicked
}

// guardAttempt runs a retry or hold attempt, which reads and writes the
// store for a peer's message, on the scheduler's goroutine, with the same
// protection as guard. After a panic the attempt's outcome is unknown, so
// the work is queued again after the longest retry delay: a message may
// then be delivered twice, never lost, and a panic that repeats does so at
// a slow, logged pace.
func (s *Server) guardAttempt(p *store.Pending) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			s.metrics.panics.WithLabelValues(panicAttempt).Inc()
			s.log.Error("retry attempt panicked; trying again later", "id", p.ID, "message_id", p.Message.ID,
				"panic", r, "stack", string(debug.Stack()))
			p.NextAt = time.Now().Add(s.opts.RetryDelayCap)
			s.sched.add(p)
		}
	}()
	s.sched.attempt(p)
}

// guardScrape reads a store gauge for a /metrics scrape. net/http would
// survive a panic in it, but not a fault, and a broken gauge should not
// break the whole scrape.
func (m *metrics) guardScrape(read func() (int, error)) (v float64) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			m.panics.WithLabelValues(panicMetrics).Inc()
			v = -1
		}
	}()
	n, err := read()
	if err != nil {
		return -1
	}
	return float64(n)
}
