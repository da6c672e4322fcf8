package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
)

// keepAlive is how often an idle stream gets an SSE comment, so that
// proxies do not close it.
const keepAlive = 15 * time.Second

// writeTimeout bounds one write to a stream: a client that stops
// reading is dropped, rather than holding the stream's goroutine.
const writeTimeout = 10 * time.Second

// parseLastEventID reads the Last-Event-ID header: the sequence number
// of the last event the client has (0: none yet, replay them all), and
// whether the header was given.
func parseLastEventID(h string) (seq uint64, given bool, err *Error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false, nil
	}
	n, perr := strconv.ParseUint(h, 10, 64)
	if perr != nil {
		return 0, false, errorf(CodeInvalidParams, "Last-Event-ID %q: want the decimal sequence number of an event this server sent", h)
	}
	return n, true, nil
}

// lastEventID reads c's Last-Event-ID header, and answers a bad one on
// the stream: ok is false then.
func (e *sse) lastEventID(c *call) (after uint64, given, ok bool) {
	after, given, err := parseLastEventID(c.r.Header.Get("Last-Event-ID"))
	if err != nil {
		e.fail(err)
		return 0, false, false
	}
	return after, given, true
}

// sse writes one task's events as Server-Sent Events, each a JSON-RPC
// response to the request, with the event's sequence number as its id.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	id json.RawMessage
	// started is true once the headers are out.
	started bool
	// count counts the request, once: with its error, or as a success
	// at its first event.
	count func(*Error)
}

func (s *Server) newSSE(w http.ResponseWriter, c *call) *sse {
	return &sse{w: w, rc: http.NewResponseController(w), id: c.req.ID, count: func(err *Error) {
		s.m.request(c.agent.Name, c.req.Method, err)
	}}
}

func (e *sse) start(err *Error) {
	if e.started {
		return
	}
	e.count(err)
	e.started = true
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	e.w.WriteHeader(http.StatusOK)
}

// event writes one event; result is a StreamResponse's JSON.
func (e *sse) event(seq uint64, result json.RawMessage) error {
	e.start(nil)
	e.deadline()
	data, err := json.Marshal(&response{JSONRPC: "2.0", ID: e.id, Result: result})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "id: %d\ndata: %s\n\n", seq, data); err != nil {
		return err
	}
	return e.rc.Flush()
}

// fail writes err as the stream's last event, without an id: it is no
// event of the task.
func (e *sse) fail(err *Error) {
	e.start(err)
	e.deadline()
	data, _ := json.Marshal(&response{JSONRPC: "2.0", ID: e.id, Error: err})
	fmt.Fprintf(e.w, "data: %s\n\n", data)
	e.rc.Flush()
}

// deadline bounds the next write by writeTimeout. A server whose
// connections cannot take a deadline writes without one.
func (e *sse) deadline() {
	_ = e.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
}

func (e *sse) comment() error {
	e.deadline()
	if _, err := fmt.Fprint(e.w, ": keep-alive\n\n"); err != nil {
		return err
	}
	return e.rc.Flush()
}

// sendStreaming answers SendStreamingMessage. A new task's stream
// starts with its first event, the Task as submitted; a retry of the
// same message (idempotent) streams the same task's log again, from
// after Last-Event-ID when the client gives one, so a client that lost
// its stream resumes it by sending the same request again. A message to
// an existing task starts with the Task as it is.
func (s *Server) sendStreaming(w http.ResponseWriter, c *call) {
	e := s.newSSE(w, c)
	after, resume, ok := e.lastEventID(c)
	if !ok {
		return
	}
	p, rec, err := s.accept(c)
	if err == nil && rec == nil {
		rec, err = s.continueTask(c, p.Message)
		if err == nil && !resume {
			s.follow(e, c, rec.Task.ID, 0, true)
			return
		}
	}
	if err != nil {
		e.fail(asError(err))
		return
	}
	s.follow(e, c, rec.Task.ID, after, false)
}

// subscribe answers SubscribeToTask. Without Last-Event-ID the stream
// starts with the Task as it is (§9.4), and a finished task is refused
// with -32004; with it, the stream carries exactly the events after that
// one, a finished task's included, then ends if the task is finished.
func (s *Server) subscribe(w http.ResponseWriter, c *call) {
	e := s.newSSE(w, c)
	after, resume, ok := e.lastEventID(c)
	if !ok {
		return
	}
	var p spec.SubscribeToTaskRequest
	if err := decodeParams(c.req.Params, &p); err != nil {
		e.fail(err)
		return
	}
	rec, err := s.lookup(c, p.ID)
	if err != nil {
		e.fail(asError(err))
		return
	}
	if !resume && rec.Task.Status.State.Terminal() {
		e.fail(errorf(CodeUnsupportedOperation, "task %s is %s: a finished task has no more events; GetTask reads it, or resubscribe with Last-Event-ID for the events you missed", p.ID, rec.Task.Status.State))
		return
	}
	if after > rec.Seq {
		e.fail(errorf(CodeInvalidParams, "Last-Event-ID %d is past task %s's last event, %d", after, p.ID, rec.Seq))
		return
	}
	s.follow(e, c, p.ID, after, !resume)
}

// follow streams task id's events after seq after until the task is
// finished or waits for its caller, the client goes, or the server
// closes. With snapshot it first sends the Task as it is, under the id
// of the task's newest event, and follows from there. A task that
// already waited for its caller before the stream's first event keeps
// the stream open: a client subscribes to such a task to see what
// happens once it is answered, so only a wait the stream itself
// carried, or the task's end, closes it.
func (s *Server) follow(e *sse, c *call, id spec.TaskID, after uint64, snapshot bool) {
	ctx := c.r.Context()
	streams := s.m.streams.WithLabelValues(c.agent.Name)
	streams.Inc()
	defer streams.Dec()
	if snapshot {
		rec, err := s.store.get(id)
		if err != nil {
			e.fail(asError(err))
			return
		}
		raw, err := json.Marshal(spec.StreamResponse{Event: &rec.Task})
		if err != nil || e.event(rec.Seq, raw) != nil {
			return
		}
		after = rec.Seq
	}
	from := after
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		ch := s.watch(id)
		evs, err := s.store.events(id, after)
		var rec *taskRecord
		if err == nil {
			rec, err = s.store.get(id)
		}
		if err != nil {
			s.unwatch(id, ch)
			s.log.Error("a2a: read task events", "task", id, "err", err)
			e.fail(asError(err))
			return
		}
		for _, ev := range evs {
			if e.event(ev.Seq, ev.Data) != nil {
				s.unwatch(id, ch)
				return
			}
			after = ev.Seq
		}
		if st := rec.Task.Status.State; after >= rec.Seq && (st.Terminal() || interrupted(st) && rec.Seq > from) {
			s.unwatch(id, ch)
			return
		}
		if !e.wait(ctx, s.ctx, ch, tick.C) {
			s.unwatch(id, ch)
			return
		}
	}
}

// wait waits for ch, sending keep-alive comments meanwhile, and reports
// false when the client or the server went first.
func (e *sse) wait(client, server context.Context, ch <-chan struct{}, tick <-chan time.Time) bool {
	// The headers go out before the first wait: a stream resumed after
	// the task's last event has nothing to send yet, and its client
	// must know it is open (and a keep-alive is no event to sniff).
	e.start(nil)
	if e.rc.Flush() != nil {
		return false
	}
	for {
		select {
		case <-ch:
			return true
		case <-tick:
			if e.comment() != nil {
				return false
			}
		case <-client.Done():
			return false
		case <-server.Done():
			return false
		}
	}
}
