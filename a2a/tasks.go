package a2a

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
)

// accept checks a SendMessage's params and records a message that
// starts a task: as a new task, published on the agent's topic, or, for
// a retry within the retention window, as nothing at all; either way it
// returns the task. A message to an existing task (taskId set) comes
// back with a nil task, for continueTask.
func (s *Server) accept(c *call) (*spec.SendMessageRequest, *taskRecord, error) {
	var p spec.SendMessageRequest
	if err := decodeParams(c.req.Params, &p); err != nil {
		return nil, nil, err
	}
	m := p.Message
	switch {
	case m == nil:
		return nil, nil, errorf(CodeInvalidParams, "params.message is missing")
	case m.ID == "":
		return nil, nil, errorf(CodeInvalidParams, "params.message.messageId is missing")
	case len(m.Parts) == 0:
		return nil, nil, errorf(CodeInvalidParams, "params.message.parts is empty")
	case m.Role != spec.MessageRoleUser:
		return nil, nil, errorf(CodeInvalidParams, "params.message.role must be ROLE_USER")
	}
	pc := pushConfigOf(&p)
	if pc != nil {
		if err := s.errPushNotServed(); err != nil {
			return nil, nil, err
		}
	}
	if m.TaskID != "" {
		if pc != nil {
			if _, err := s.lookup(c, m.TaskID); err != nil {
				return nil, nil, err
			}
			if _, err := s.addPush(c.r.Context(), c.agent, m.TaskID, pc, "params.configuration.taskPushNotificationConfig"); err != nil {
				return nil, nil, err
			}
		}
		return &p, nil, nil
	}
	now := time.Now()
	rec := &taskRecord{Agent: c.agent.Name, Owner: c.caller, IdemKey: s.idempotencyKey(c, m.ID)}
	rec.Task = *spec.NewSubmittedTask(m, m)
	ts := now.UTC()
	rec.Task.Status.Timestamp = &ts
	m.TaskID, m.ContextID = rec.Task.ID, rec.Task.ContextID
	snapshot := rec.Task
	if pc != nil {
		// Made before the task, so that a URL the bus refuses refuses
		// the send, and the task's first event is pushed.
		if _, err := s.addPush(c.r.Context(), c.agent, rec.Task.ID, pc, "params.configuration.taskPushNotificationConfig"); err != nil {
			return nil, nil, err
		}
	}
	got, created, err := s.store.create(rec, &snapshot, s.opts.Retention, now)
	if pc != nil && !created {
		// A retry: the first request's task keeps its configs.
		s.dropPush(c.agent, rec.Task.ID)
	}
	if err != nil {
		return nil, nil, err
	}
	if !created && (got.Owner != c.caller || got.Agent != c.agent.Name) {
		// The key is scoped by agent and caller, so this is a stored
		// record that contradicts its key.
		return nil, nil, errors.New("idempotency record names another caller's task")
	}
	if created {
		s.m.tasks.WithLabelValues(c.agent.Name).Inc()
		s.kickPush(got.Task.ID)
		s.publish(c.agent, got, m)
	} else {
		s.m.replays.WithLabelValues(c.agent.Name).Inc()
	}
	return &p, got, nil
}

// idempotencyKey scopes the retry key, the Idempotency-Key header or
// else the message id, to the agent and the caller, so that one caller
// cannot reach another's task by guessing its key. With
// Options.IdempotencyHeaderOnly a send without the header has no key.
func (s *Server) idempotencyKey(c *call, messageID string) string {
	k := "m:" + messageID
	if h := c.r.Header.Get("Idempotency-Key"); h != "" {
		k = "k:" + h
	} else if s.opts.IdempotencyHeaderOnly {
		return ""
	}
	return c.agent.Name + "\x00" + c.caller + "\x00" + k
}

// continueTask records m, a message to a task the caller has, and
// publishes it, unless the task's history has it already (a retry; not
// with Options.IdempotencyHeaderOnly).
func (s *Server) continueTask(c *call, m *spec.Message) (*taskRecord, error) {
	fresh := false
	rec, err := s.store.update(m.TaskID, time.Now(), func(rec *taskRecord) ([]spec.Event, error) {
		fresh = false // again at each run (taskStore.update)
		if !s.owns(c, rec) {
			return nil, errNoTask
		}
		for _, h := range rec.Task.History {
			if h.ID == m.ID && h.Role == spec.MessageRoleUser && !s.opts.IdempotencyHeaderOnly {
				return nil, nil // a retry
			}
		}
		if rec.Task.Status.State.Terminal() {
			return nil, errorf(CodeUnsupportedOperation, "task %s is %s: a finished task takes no more messages; start a new task (omit taskId)", rec.Task.ID, rec.Task.Status.State)
		}
		if m.ContextID != "" && m.ContextID != rec.Task.ContextID {
			return nil, errorf(CodeInvalidParams, "params.message.contextId %q is not task %s's context %q", m.ContextID, rec.Task.ID, rec.Task.ContextID)
		}
		m.ContextID = rec.Task.ContextID
		fresh = true
		rec.Task.History = append(rec.Task.History, m)
		return []spec.Event{statusTo(rec, spec.TaskStateWorking, nil)}, nil
	})
	if errors.Is(err, errNoTask) {
		return nil, errorf(CodeTaskNotFound, "task %s not found", m.TaskID)
	}
	if err != nil {
		return nil, err
	}
	if fresh {
		s.notify(rec.Task.ID)
		s.publish(c.agent, rec, m)
	} else {
		s.m.replays.WithLabelValues(c.agent.Name).Inc()
	}
	return rec, nil
}

// owns reports whether the caller may see rec.
func (s *Server) owns(c *call, rec *taskRecord) bool {
	return rec.Owner == c.caller && rec.Agent == c.agent.Name
}

// sendMessage answers SendMessage: the task once it is finished or
// waits for its caller, or at once with returnImmediately, or as it is
// after Options.BlockTimeout, if set.
func (s *Server) sendMessage(c *call) (any, error) {
	p, rec, err := s.accept(c)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		if rec, err = s.continueTask(c, p.Message); err != nil {
			return nil, err
		}
	}
	if p.Config == nil || !p.Config.ReturnImmediately {
		if rec, err = s.await(c, rec.Task.ID); err != nil {
			return nil, err
		}
		if rec.Direct && rec.Task.Status.Message != nil {
			// The agent answered with a message, not a task: the
			// caller gets the message, which belongs to no task it
			// need know of.
			m := *rec.Task.Status.Message
			m.TaskID = ""
			return spec.StreamResponse{Event: &m}, nil
		}
	}
	var hl *int
	if p.Config != nil {
		hl = p.Config.HistoryLength
	}
	return spec.StreamResponse{Event: view(&rec.Task, hl, true)}, nil
}

// await waits until task id is finished or waits for its caller, the
// request ends, or Options.BlockTimeout (if set) passes, and returns it
// then.
func (s *Server) await(c *call, id spec.TaskID) (*taskRecord, error) {
	var timeout <-chan time.Time // nil, never ready, without a bound
	if s.opts.BlockTimeout > 0 {
		t := time.NewTimer(s.opts.BlockTimeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		ch := s.watch(id)
		rec, err := s.store.get(id)
		if err != nil || rec.Task.Status.State.Terminal() || interrupted(rec.Task.Status.State) {
			s.unwatch(id, ch)
			return rec, err
		}
		select {
		case <-ch:
		case <-timeout:
			s.unwatch(id, ch)
			return rec, nil
		case <-c.r.Context().Done():
			s.unwatch(id, ch)
			return rec, nil
		case <-s.ctx.Done():
			s.unwatch(id, ch)
			return nil, ErrClosed
		}
	}
}

// view returns a copy of t with its history cut to its last
// historyLength messages (nil: all of them), and without artifacts
// unless withArtifacts.
func view(t *spec.Task, historyLength *int, withArtifacts bool) *spec.Task {
	v := *t
	if historyLength != nil && *historyLength >= 0 && *historyLength < len(v.History) {
		v.History = v.History[len(v.History)-*historyLength:]
	}
	if !withArtifacts {
		v.Artifacts = nil
	}
	return &v
}

// lookup returns the caller's task id, or -32001.
func (s *Server) lookup(c *call, id spec.TaskID) (*taskRecord, error) {
	if id == "" {
		return nil, errorf(CodeInvalidParams, "params.id is missing")
	}
	rec, err := s.store.get(id)
	if errors.Is(err, errNoTask) || err == nil && !s.owns(c, rec) {
		return nil, errorf(CodeTaskNotFound, "task %s not found", id)
	}
	return rec, err
}

// getTask answers GetTask.
func (s *Server) getTask(c *call) (any, error) {
	var p spec.GetTaskRequest
	if err := decodeParams(c.req.Params, &p); err != nil {
		return nil, err
	}
	if p.HistoryLength != nil && *p.HistoryLength < 0 {
		return nil, errorf(CodeInvalidParams, "params.historyLength %d is negative", *p.HistoryLength)
	}
	rec, err := s.lookup(c, p.ID)
	if err != nil {
		return nil, err
	}
	return view(&rec.Task, p.HistoryLength, true), nil
}

// listTasks answers ListTasks: the caller's tasks of this agent, newest
// first, a page at a time.
func (s *Server) listTasks(c *call) (any, error) {
	var p spec.ListTasksRequest
	if len(c.req.Params) > 0 && string(c.req.Params) != "null" {
		if err := decodeParams(c.req.Params, &p); err != nil {
			return nil, err
		}
	}
	switch {
	case p.PageSize == 0:
		p.PageSize = 50
	case p.PageSize < 1 || p.PageSize > 100:
		return nil, errorf(CodeInvalidParams, "params.pageSize %d: want 1 to 100", p.PageSize)
	}
	if p.HistoryLength != nil && *p.HistoryLength < 0 {
		return nil, errorf(CodeInvalidParams, "params.historyLength %d is negative", *p.HistoryLength)
	}
	var cursor *listKey
	if p.PageToken != "" {
		k, ok := parsePageToken(p.PageToken)
		if !ok {
			return nil, errorf(CodeInvalidParams, "params.pageToken %q is not a token this server gave", p.PageToken)
		}
		cursor = &k
	}
	page, total, err := s.store.list(c.agent.Name, cursor, p.PageSize+1, func(rec *taskRecord) bool {
		t := &rec.Task
		return rec.Owner == c.caller &&
			(p.ContextID == "" || t.ContextID == p.ContextID) &&
			(p.Status == spec.TaskStateUnspecified || t.Status.State == p.Status) &&
			(p.StatusTimestampAfter == nil || t.Status.Timestamp != nil && t.Status.Timestamp.After(*p.StatusTimestampAfter))
	})
	if err != nil {
		return nil, err
	}
	resp := &spec.ListTasksResponse{Tasks: []*spec.Task{}, TotalSize: total, PageSize: p.PageSize}
	if len(page) > p.PageSize {
		page = page[:p.PageSize]
		resp.NextPageToken = pageToken(keyOf(page[len(page)-1]))
	}
	for _, rec := range page {
		resp.Tasks = append(resp.Tasks, view(&rec.Task, p.HistoryLength, p.IncludeArtifacts))
	}
	return resp, nil
}

// pageToken is the opaque nextPageToken for a page that ends at k.
func pageToken(k listKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.at, 10) + "|" + string(k.id)))
}

// parsePageToken reads a pageToken; ok is false for one this server
// would not give.
func parsePageToken(tok string) (k listKey, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return k, false
	}
	at, id, found := strings.Cut(string(raw), "|")
	n, err := strconv.ParseInt(at, 10, 64)
	if !found || err != nil || id == "" {
		return k, false
	}
	return listKey{at: n, id: spec.TaskID(id)}, true
}

// cancelTask answers CancelTask: a task not finished is canceled, and
// the agent is told with an a2a_cancel message on its topic.
func (s *Server) cancelTask(c *call) (any, error) {
	var p spec.CancelTaskRequest
	if err := decodeParams(c.req.Params, &p); err != nil {
		return nil, err
	}
	rec, err := s.lookup(c, p.ID)
	if err != nil {
		return nil, err
	}
	var finished spec.TaskState
	changed, err := s.setStatus(p.ID, func(cur spec.TaskState) bool {
		finished = cur
		return !cur.Terminal()
	}, spec.TaskStateCanceled, nil)
	if err != nil {
		return nil, err
	}
	if !changed {
		return nil, errorf(CodeTaskNotCancelable, "task %s is %s already and cannot be canceled", p.ID, finished)
	}
	s.tellCanceled(c.agent, rec)
	rec, err = s.store.get(p.ID)
	if err != nil {
		return nil, err
	}
	return &rec.Task, nil
}
