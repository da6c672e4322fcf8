package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// Payload is the bus message a SendMessage publishes on the agent's
// topic. Its type and text make it an ordinary chat message, which an
// agent that knows nothing of A2A answers on outbound:{chat_id}; the
// rest is for agents that do.
type Payload struct {
	// Type is "plaintext_message".
	Type string `json:"type"`
	// Text is the message's text parts, joined by newlines.
	Text string `json:"text"`
	// ChatID is "a2a-{taskId}", so that a chat agent's answer lands on
	// ReplyTo.
	ChatID string `json:"chat_id"`
	// ConversationID is the A2A context id.
	ConversationID string `json:"conversation_id"`
	// CorrelationID is the A2A task id.
	CorrelationID string `json:"correlation_id"`
	// ReplyTo is where the agent answers: outbound:a2a-{taskId}.
	ReplyTo string `json:"reply_to"`
	// A2A is the A2A side of the message.
	A2A PayloadA2A `json:"a2a"`
}

// PayloadA2A is the A2A part of a Payload.
type PayloadA2A struct {
	// Agent is the name the caller addressed.
	Agent string `json:"agent"`
	// TaskID and ContextID are the task's.
	TaskID    spec.TaskID `json:"taskId"`
	ContextID string      `json:"contextId"`
	// Caller is who sent the message, as the bus's auth named it ("" on
	// a bus without auth).
	Caller string `json:"caller,omitempty"`
	// Message is the A2A message, parts and all.
	Message *spec.Message `json:"message"`
}

// Answer types an A2A-aware agent may publish on ReplyTo; any other
// payload with a string "text" is an agent message that completes the
// task, and any other payload at all completes it with the payload as a
// data part.
const (
	// TypeStatus is {"type":"a2a_status","state":"working","text":"..."}:
	// the task's new state (TASK_STATE_WORKING or working,
	// input-required, completed, failed, rejected, canceled,
	// auth-required) with an optional agent message, given as text or
	// as a full A2A "message".
	TypeStatus = "a2a_status"
	// TypeArtifact is {"type":"a2a_artifact","artifact":{...},
	// "append":false,"lastChunk":true}: an artifact, or a chunk of one.
	TypeArtifact = "a2a_artifact"
	// TypeMessage is {"type":"a2a_message","text":"..."} (or a full A2A
	// "message"): the agent answers with a message rather than a task
	// (§3.1.1 lets it). The task completes with that message, and the
	// blocking SendMessage that started it answers {"message": ...}.
	TypeMessage = "a2a_message"
	// TypeCancel is what the server publishes on the agent's topic when
	// a caller cancels a task: {"type":"a2a_cancel","correlation_id":...}.
	TypeCancel = "a2a_cancel"
)

// answer is the part of an answer payload the server reads.
type answer struct {
	Type      string         `json:"type"`
	Text      *string        `json:"text"`
	State     string         `json:"state"`
	Message   *spec.Message  `json:"message"`
	Artifact  *spec.Artifact `json:"artifact"`
	Append    bool           `json:"append"`
	LastChunk bool           `json:"lastChunk"`
}

// agentMessage is the answer's agent message for rec's task: its
// "message", or its "text" as one; nil for neither.
func (ans *answer) agentMessage(rec *taskRecord) *spec.Message {
	msg := ans.Message
	if msg == nil && ans.Text != nil {
		return agentMessage(rec.Task.ID, rec.Task.ContextID, *ans.Text)
	}
	if msg != nil {
		msg.TaskID, msg.ContextID, msg.Role = rec.Task.ID, rec.Task.ContextID, spec.MessageRoleAgent
		if msg.ID == "" {
			msg.ID = spec.NewMessageID()
		}
	}
	return msg
}

// replyTopic is where the answers to task id land.
func replyTopic(id spec.TaskID) string { return replyPrefix + string(id) }

// messageText joins m's text parts.
func messageText(m *spec.Message) string {
	var texts []string
	for _, p := range m.Parts {
		if t, ok := p.Content.(spec.Text); ok {
			texts = append(texts, string(t))
		}
	}
	return strings.Join(texts, "\n")
}

// publish puts msg, of task rec, on the agent's topic through the bus's
// publish path, and records what the bus answered: a bus that refused
// it, or found nobody to take it, fails the task; one that delivered it
// makes a submitted task working. It runs on its own goroutine: the bus
// answers once the agent has, and the agent's answer must reach the
// task meanwhile.
func (s *Server) publish(a *agent, rec *taskRecord, msg *spec.Message) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		p := &Payload{
			Type:           "plaintext_message",
			Text:           messageText(msg),
			ChatID:         "a2a-" + string(rec.Task.ID),
			ConversationID: rec.Task.ContextID,
			CorrelationID:  string(rec.Task.ID),
			ReplyTo:        replyTopic(rec.Task.ID),
			A2A:            PayloadA2A{Agent: a.Name, TaskID: rec.Task.ID, ContextID: rec.Task.ContextID, Caller: rec.Owner, Message: msg},
		}
		res, err := a.conn.SendMessage(s.ctx, a.Topic, p, nil)
		if err == nil && mayDeadLetterLater(res) {
			s.noteBusMessage(rec.Task.ID, res.MessageID)
		}
		var why string
		next := spec.TaskStateWorking
		switch {
		case err != nil && (errors.As(err, new(*protocol.Error)) || errors.Is(err, peer.ErrMessageTooBig)):
			// Refused for sure, by the bus or before it was sent.
			why, next = fmt.Sprintf("the bus refused the message: %v", err), spec.TaskStateFailed
		case err != nil:
			// The message may or may not have reached the agent: its
			// answer, if any, still settles the task.
			s.log.Warn("a2a: publish unconfirmed", "agent", a.Name, "task", rec.Task.ID, "err", err)
			return
		case res.NoSubscribers():
			why, next = fmt.Sprintf("no agent subscribes %s", a.Topic), spec.TaskStateFailed
		case res.Held:
			return // submitted until the agent subscribes
		case rejected(res):
			why, next = "the agent rejected the message: "+res.Acks[0].Message, spec.TaskStateRejected
		}
		// Only a task nobody has moved on yet: the agent's answer
		// usually arrives before the bus's ack does.
		_, err = s.setStatus(rec.Task.ID, func(cur spec.TaskState) bool {
			return cur == spec.TaskStateSubmitted
		}, next, agentMessage(rec.Task.ID, rec.Task.ContextID, why))
		if err != nil {
			s.log.Error("a2a: record publish outcome", "task", rec.Task.ID, "err", err)
		}
	}()
}

// mayDeadLetterLater reports whether the bus still holds the message, in
// a retry or a hold, so that it may dead-letter it later.
func mayDeadLetterLater(res *protocol.SendMessageResult) bool {
	if res.Held {
		return true
	}
	for _, ack := range res.Acks {
		if ack.Retrying || ack.Held {
			return true
		}
	}
	return false
}

// deadLetterEvent is the part of a system:message.dead_lettered event
// the server reads.
type deadLetterEvent struct {
	MessageID string `json:"messageId"`
	ClientID  string `json:"client_id"`
	Reason    string `json:"reason"`
}

// noteBusMessage keeps the bus's id of a message of task id that the
// bus may dead-letter later, for the dead-letter event that names it. An
// event may come before this is stored (a retry due at once fails
// again): then the event waits in earlyDead, and this applies it.
func (s *Server) noteBusMessage(id spec.TaskID, busID string) {
	if err := s.store.noteBusMessage(id, busID); err != nil {
		s.log.Error("a2a: record the bus's message id", "task", id, "err", err)
		return
	}
	s.deadMu.Lock()
	ev, early := s.earlyDead[busID]
	delete(s.earlyDead, busID)
	s.deadMu.Unlock()
	if early {
		s.failDeadLettered(id, ev)
	}
}

// maxEarlyDead bounds earlyDead: dead-letter events of messages not
// (yet) known, most of them other peers' messages.
const maxEarlyDead = 1024

// handleDeadLetter fails the task whose message the bus dead-lettered
// after its retries or its hold, if the task is still submitted or
// working: no answer will come.
func (s *Server) handleDeadLetter(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	if d.From != d.Conn.ServerID() {
		return peer.Result{Message: "not from the bus"}, nil
	}
	var ev deadLetterEvent
	if err := d.Decode(&ev); err != nil || ev.MessageID == "" {
		return peer.Result{Message: "not a dead-letter event"}, nil
	}
	// Looked up and, if unknown, kept under deadMu, so that
	// noteBusMessage either is seen here or sees the event.
	s.deadMu.Lock()
	id, err := s.store.taskOfBusMessage(ev.MessageID)
	if err == nil && id == "" {
		if len(s.earlyDead) >= maxEarlyDead {
			clear(s.earlyDead)
		}
		s.earlyDead[ev.MessageID] = ev
	}
	s.deadMu.Unlock()
	if err != nil || id == "" {
		return peer.Result{Processed: true}, err
	}
	s.failDeadLettered(id, ev)
	return peer.Result{Processed: true}, nil
}

// failDeadLettered fails task id for ev, if it is still submitted or
// working.
func (s *Server) failDeadLettered(id spec.TaskID, ev deadLetterEvent) {
	why := fmt.Sprintf("the bus dead-lettered the message (%s", ev.Reason)
	if ev.ClientID != "" {
		why += ", subscriber " + ev.ClientID
	}
	why += ")"
	_, err := s.setStatus(id, func(cur spec.TaskState) bool {
		return cur == spec.TaskStateSubmitted || cur == spec.TaskStateWorking
	}, spec.TaskStateFailed, agentMessage(id, "", why))
	if err != nil && !errors.Is(err, errNoTask) {
		s.log.Error("a2a: fail a dead-lettered task", "task", id, "err", err)
	}
}

// rejected reports whether every subscriber rejected the message, so
// that the bus dead-lettered it: the A2A state for an agent that
// refuses a task.
func rejected(res *protocol.SendMessageResult) bool {
	for _, ack := range res.Acks {
		if ack.DeadLetter == "" {
			return false
		}
	}
	return len(res.Acks) > 0
}

// agentMessage returns an agent message of text for the task, nil for
// no text.
func agentMessage(id spec.TaskID, contextID, text string) *spec.Message {
	if text == "" {
		return nil
	}
	m := spec.NewMessage(spec.MessageRoleAgent, spec.NewTextPart(text))
	m.TaskID, m.ContextID = id, contextID
	return m
}

// setStatus moves task id to state, with msg as its status message and
// in its history, when ok accepts the current state; it reports whether
// it did.
func (s *Server) setStatus(id spec.TaskID, ok func(spec.TaskState) bool, state spec.TaskState, msg *spec.Message) (bool, error) {
	changed := false
	_, err := s.store.update(id, time.Now(), func(rec *taskRecord) ([]spec.Event, error) {
		changed = false // again at each run (taskStore.update)
		if !ok(rec.Task.Status.State) {
			return nil, nil
		}
		changed = true
		if msg != nil && msg.ContextID == "" {
			msg.ContextID = rec.Task.ContextID
		}
		return []spec.Event{statusTo(rec, state, msg)}, nil
	})
	if changed {
		s.notify(id)
	}
	return changed, err
}

// statusTo sets rec's status and returns the event that says so.
func statusTo(rec *taskRecord, state spec.TaskState, msg *spec.Message) *spec.TaskStatusUpdateEvent {
	now := time.Now().UTC()
	rec.Task.Status = spec.TaskStatus{State: state, Message: msg, Timestamp: &now}
	if msg != nil {
		rec.Task.History = append(rec.Task.History, msg)
	}
	return &spec.TaskStatusUpdateEvent{TaskID: rec.Task.ID, ContextID: rec.Task.ContextID, Status: rec.Task.Status}
}

// handleAnswer takes an agent's answer on outbound:a2a-{taskId} into the
// task. An answer to a task the store does not hold is rejected, so an
// operator finds it in the dead-letter queue.
func (s *Server) handleAnswer(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	res, outcome, err := s.takeAnswer(d)
	if err == nil {
		s.m.answers.WithLabelValues(outcome).Inc()
	}
	return res, err
}

// takeAnswer is handleAnswer but for the counting: it also returns the
// outcome the metric counts.
func (s *Server) takeAnswer(d *peer.Delivery) (peer.Result, string, error) {
	id := spec.TaskID(strings.TrimPrefix(d.Topic, replyPrefix))
	var ans answer
	if err := json.Unmarshal(d.Payload, &ans); err != nil {
		return peer.Result{Reject: true, Message: fmt.Sprintf("answer to task %s is not a JSON object: %v", id, err)}, "rejected", nil
	}
	var refused error
	finished := false
	rec, err := s.store.update(id, time.Now(), func(rec *taskRecord) ([]spec.Event, error) {
		refused, finished = nil, false // again at each run (taskStore.update)
		if rec.Task.Status.State.Terminal() {
			finished = true
			return nil, nil // finished tasks do not change
		}
		if rec.Seq >= uint64(s.opts.MaxEventsPerTask) {
			refused = fmt.Errorf("the task has %d events, the most one keeps (MaxEventsPerTask)", rec.Seq)
			return nil, nil
		}
		evs, err := answerEvents(rec, &ans, d.Payload)
		refused = err
		return evs, nil
	})
	switch {
	case errors.Is(err, errNoTask):
		return peer.Result{Reject: true, Message: fmt.Sprintf("no A2A task %s (expired, or never created)", id)}, "rejected", nil
	case err != nil:
		return peer.Result{}, "", err
	case refused != nil:
		return peer.Result{Reject: true, Message: fmt.Sprintf("answer to task %s: %v", id, refused)}, "rejected", nil
	case finished:
		// Taken, so the bus neither retries nor dead-letters it; the
		// task it would change is finished.
		return peer.Result{Processed: true, Message: "task " + string(id) + " is finished already; the answer changes nothing"}, "ignored", nil
	}
	s.notify(id)
	return peer.Result{Processed: true, Message: "task " + string(id) + " " + rec.Task.Status.State.String()}, "applied", nil
}

// answerEvents applies one answer to rec and returns the events it
// makes.
func answerEvents(rec *taskRecord, ans *answer, raw json.RawMessage) ([]spec.Event, error) {
	id, ctxID := rec.Task.ID, rec.Task.ContextID
	switch ans.Type {
	case TypeStatus:
		state, err := parseState(ans.State)
		if err != nil {
			return nil, err
		}
		return []spec.Event{statusTo(rec, state, ans.agentMessage(rec))}, nil
	case TypeMessage:
		msg := ans.agentMessage(rec)
		if msg == nil {
			return nil, errors.New(`a2a_message needs a "text" or a "message"`)
		}
		rec.Direct = true
		return []spec.Event{statusTo(rec, spec.TaskStateCompleted, msg)}, nil
	case TypeArtifact:
		if ans.Artifact == nil || len(ans.Artifact.Parts) == 0 {
			return nil, errors.New(`a2a_artifact needs an "artifact" with "parts"`)
		}
		art := ans.Artifact
		if art.ID == "" {
			art.ID = spec.NewArtifactID()
		}
		addArtifact(&rec.Task, art, ans.Append)
		return []spec.Event{&spec.TaskArtifactUpdateEvent{TaskID: id, ContextID: ctxID, Artifact: art, Append: ans.Append, LastChunk: ans.LastChunk}}, nil
	}
	var msg *spec.Message
	if ans.Text != nil {
		msg = agentMessage(id, ctxID, *ans.Text)
	} else {
		msg = spec.NewMessage(spec.MessageRoleAgent, spec.NewDataPart(json.RawMessage(raw)))
		msg.TaskID, msg.ContextID = id, ctxID
	}
	return []spec.Event{statusTo(rec, spec.TaskStateCompleted, msg)}, nil
}

// addArtifact adds art to t, or appends its parts to the artifact of
// the same id when appending.
func addArtifact(t *spec.Task, art *spec.Artifact, appending bool) {
	for _, old := range t.Artifacts {
		if old.ID == art.ID {
			if appending {
				old.Parts = append(old.Parts, art.Parts...)
			} else {
				*old = *art
			}
			return
		}
	}
	t.Artifacts = append(t.Artifacts, art)
}

// parseState reads a state as TASK_STATE_INPUT_REQUIRED or
// input-required.
func parseState(s string) (spec.TaskState, error) {
	name := strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
	if !strings.HasPrefix(name, "TASK_STATE_") {
		name = "TASK_STATE_" + name
	}
	switch st := spec.TaskState(name); st {
	case spec.TaskStateSubmitted, spec.TaskStateWorking, spec.TaskStateInputRequired, spec.TaskStateAuthRequired,
		spec.TaskStateCompleted, spec.TaskStateFailed, spec.TaskStateRejected, spec.TaskStateCanceled:
		return st, nil
	}
	return "", fmt.Errorf("state %q: want working, input-required, auth-required, completed, failed, rejected or canceled", s)
}

// interrupted reports whether the task waits for its caller.
func interrupted(st spec.TaskState) bool {
	return st == spec.TaskStateInputRequired || st == spec.TaskStateAuthRequired
}

// cancelNotice is what tellCanceled publishes.
type cancelNotice struct {
	Type           string `json:"type"`
	ConversationID string `json:"conversation_id"`
	CorrelationID  string `json:"correlation_id"`
}

// tellCanceled tells the agent, on its topic, that the caller canceled
// rec. The task is canceled whatever the agent does with it: an agent
// that knows nothing of A2A leaves the notice unprocessed, and its late
// answer no longer changes the task.
func (s *Server) tellCanceled(a *agent, rec *taskRecord) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		n := &cancelNotice{Type: TypeCancel, ConversationID: rec.Task.ContextID, CorrelationID: string(rec.Task.ID)}
		if _, err := a.conn.SendMessage(s.ctx, a.Topic, n, nil); err != nil {
			s.log.Warn("a2a: cancel notice not published", "agent", a.Name, "task", rec.Task.ID, "err", err)
		}
	}()
}
