package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// The dead-letter queue's administration methods. With authentication on,
// only a credential with admin may call them (conn.checkAdmin); without
// it any initialized peer may, which is why bub serve listens on
// loopback by default.

// maxListLimit bounds a dlq.list page, so one call cannot load the whole
// queue into memory.
const maxListLimit = 1000

func (c *conn) dlqList(req *rpcstream.Request) (any, error) {
	var p protocol.DLQListParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if p.Limit > maxListLimit {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "limit %d is more than %d; page with the cursor", p.Limit, maxListLimit)
	}
	entries, next, err := c.server.store.ListDeadLetters(storeFilter(p.DLQFilter), p.Cursor, p.Limit)
	if err != nil {
		return nil, storeError(err)
	}
	result := protocol.DLQListResult{Entries: make([]protocol.DeadLetter, 0, len(entries)), NextCursor: next}
	for _, d := range entries {
		result.Entries = append(result.Entries, wireDeadLetter(d))
	}
	return result, nil
}

func (c *conn) dlqGet(req *rpcstream.Request) (any, error) {
	var p protocol.DLQGetParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if p.ID == "" {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "id is required")
	}
	d, err := c.server.store.GetDeadLetter(p.ID)
	if err != nil {
		return nil, deadLetterError(p.ID, err)
	}
	return wireDeadLetter(d), nil
}

func (c *conn) dlqReplay(req *rpcstream.Request) (any, error) {
	var p protocol.DLQReplayParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if len(p.IDs) == 0 {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "ids is required: name at least one dead letter")
	}
	if err := c.checkReplayIDs(len(p.IDs)); err != nil {
		return nil, err
	}
	to, err := replayTarget(p.To)
	if err != nil {
		return nil, err
	}
	return c.server.replayAll(p.IDs, to), nil
}

// replayTarget checks a replay's to; "" means the topic.
func replayTarget(to string) (string, error) {
	switch to {
	case "":
		return protocol.ReplayToTopic, nil
	case protocol.ReplayToTopic, protocol.ReplayToSubscriber:
		return to, nil
	}
	return "", protocol.Errorf(protocol.ErrInvalidParams, "to %q is not %q or %q", to, protocol.ReplayToTopic, protocol.ReplayToSubscriber)
}

// replayAll replays each dead letter of ids, each on its own: one that
// fails says why in its outcome and the others go on.
func (s *Server) replayAll(ids []string, to string) protocol.DLQReplayResult {
	result := protocol.DLQReplayResult{Outcomes: []protocol.DLQReplayOutcome{}}
	for _, id := range ids {
		out := protocol.DLQReplayOutcome{ID: id}
		if err := s.replay(id, to, &out); err != nil {
			out.Error = err.Error()
		}
		result.Outcomes = append(result.Outcomes, out)
	}
	return result
}

// replay sends one dead letter again. The entry leaves the queue only once
// the replay is accepted: for a topic, once routing found a subscriber or
// held the message; for a subscriber, once the retry is stored.
func (s *Server) replay(id, to string, out *protocol.DLQReplayOutcome) error {
	d, err := s.store.GetDeadLetter(id)
	if err != nil {
		return deadLetterError(id, err)
	}
	if to == protocol.ReplayToSubscriber {
		if d.ClientID == "" {
			return fmt.Errorf("dead letter %s was meant for no subscriber (reason %s); replay it to its topic", id, d.Reason)
		}
		p := &store.Pending{Kind: store.KindRetry, Message: d.Message, ClientID: d.ClientID, Subscription: d.Subscription, Subscriber: d.Subscriber, NextAt: time.Now()}
		if err := s.store.Requeue(id, p); err != nil {
			return deadLetterError(id, err)
		}
		s.emitDeadLetter(protocol.JournalReplayed, d, id, to)
		s.sched.add(p)
		out.Accepted = true
		return nil
	}
	m := d.Message
	result, err := s.publish(context.Background(), &m, true)
	if err != nil {
		return err
	}
	out.Result = result
	if !result.Success && !result.Held {
		return fmt.Errorf("no subscriber for %q; the entry stays", m.Topic)
	}
	if err := s.store.RemoveDeadLetter(id); err != nil {
		return deadLetterError(id, err)
	}
	s.emitDeadLetter(protocol.JournalReplayed, d, id, to)
	out.Accepted = true
	return nil
}

func (c *conn) dlqPurge(req *rpcstream.Request) (any, error) {
	var p protocol.DLQPurgeParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	st := c.server.store
	if p.ID != "" && (p.All || p.DLQFilter != protocol.DLQFilter{}) {
		// Narrowing to the id, or ignoring it, would each purge other
		// than what one of the two readings meant.
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "purge by id %q or by filter (topic, reason, since, until) or all, not both", p.ID)
	}
	if p.ID != "" {
		purged := c.server.emitPurging(store.Filter{}, p.ID)
		if err := st.RemoveDeadLetter(p.ID); err != nil {
			return nil, deadLetterError(p.ID, err)
		}
		purged()
		return protocol.DLQPurgeResult{Purged: 1}, nil
	}
	if !p.All && p.DLQFilter == (protocol.DLQFilter{}) {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "say what to purge: an id, a filter (topic, reason, since, until), or all: true")
	}
	purged := c.server.emitPurging(storeFilter(p.DLQFilter), "")
	n, err := st.PurgeDeadLetters(storeFilter(p.DLQFilter))
	if err != nil {
		return nil, storeError(err)
	}
	purged()
	return protocol.DLQPurgeResult{Purged: n}, nil
}

// storeFilter converts a wire filter; the store checks the pattern and
// the reason, and storeError turns its refusal into -32602.
func storeFilter(f protocol.DLQFilter) store.Filter {
	return store.Filter{Topic: f.Topic, Reason: f.Reason, Since: f.Since, Until: f.Until}
}

func storeError(err error) error {
	switch {
	case errors.Is(err, store.ErrDamaged):
		// A damaged record's checks may fail as an invalid argument
		// would, but the caller's arguments are not at fault.
		return protocol.Errorf(protocol.ErrInternal, "store: %v", err)
	case errors.Is(err, store.ErrNotFound):
		return protocol.Errorf(protocol.ErrNotFound, "%v", err)
	case errors.Is(err, store.ErrInvalid):
		return protocol.Errorf(protocol.ErrInvalidParams, "%v", err)
	}
	return protocol.Errorf(protocol.ErrInternal, "store: %v", err)
}

// deadLetterError is storeError for a call that named the dead letter id.
// An unknown id is said once, in the caller's words: the store's own text
// ("get dead letter d-999: not found") behind the code's name "not found"
// would say it twice.
func deadLetterError(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return protocol.Errorf(protocol.ErrNotFound, "dead letter %s does not exist", id)
	}
	return storeError(err)
}

func wireDeadLetter(d *store.DeadLetter) protocol.DeadLetter {
	w := protocol.DeadLetter{
		ID:           d.ID,
		MessageID:    d.Message.ID,
		Topic:        d.Message.Topic,
		Payload:      d.Message.Payload,
		From:         d.Message.From,
		Meta:         d.Message.Meta,
		ClientID:     d.ClientID,
		Subscription: d.Subscription,
		Reason:       d.Reason,
		Attempts:     make([]protocol.DeliveryAttempt, 0, len(d.Attempts)),
		PublishedAt:  d.Message.PublishedAt,
		FirstAttempt: d.FirstAttempt,
		LastAttempt:  d.LastAttempt,
		DeadAt:       d.DeadAt,
	}
	for _, a := range d.Attempts {
		w.Attempts = append(w.Attempts, protocol.DeliveryAttempt{At: a.At, Error: a.Error})
	}
	return w
}

// A DeadLetterQueue is the dead-letter queue as an operator's tool (the
// console) administers it, as the dlq.* methods do for a peer: in the
// wire's form, with the store's errors in the protocol's terms.
type DeadLetterQueue struct {
	s *Server
}

// DeadLetterQueue returns s's dead-letter queue.
func (s *Server) DeadLetterQueue() DeadLetterQueue {
	return DeadLetterQueue{s: s}
}

// List returns a page of at most limit dead letters f matches,
// oldest first, from cursor (""), and the cursor of the next ("" when
// this was the last).
func (q DeadLetterQueue) List(f store.Filter, cursor string, limit int) ([]protocol.DeadLetter, string, error) {
	entries, next, err := q.s.store.ListDeadLetters(f, cursor, limit)
	if err != nil {
		return nil, "", storeError(err)
	}
	out := make([]protocol.DeadLetter, 0, len(entries))
	for _, d := range entries {
		out = append(out, wireDeadLetter(d))
	}
	return out, next, nil
}

// Get returns dead letter id, payload and attempts included.
func (q DeadLetterQueue) Get(id string) (protocol.DeadLetter, error) {
	d, err := q.s.store.GetDeadLetter(id)
	if err != nil {
		return protocol.DeadLetter{}, deadLetterError(id, err)
	}
	return wireDeadLetter(d), nil
}

// Count counts the dead letters.
func (q DeadLetterQueue) Count() (int, error) {
	n, err := q.s.store.CountDeadLetters()
	if err != nil {
		return 0, storeError(err)
	}
	return n, nil
}

// Replay replays dead letters ids to their topic or
// subscriber (to, "" for the topic), as dlq.replay does, within
// Limits.MaxReplayIDs; it is refused once the bus drains.
func (q DeadLetterQueue) Replay(ids []string, to string) (protocol.DLQReplayResult, error) {
	to, err := replayTarget(to)
	if err != nil {
		return protocol.DLQReplayResult{}, err
	}
	if len(ids) == 0 {
		return protocol.DLQReplayResult{}, protocol.Errorf(protocol.ErrInvalidParams, "ids is required: name at least one dead letter")
	}
	if bound := q.s.limits().MaxReplayIDs; !under(len(ids)-1, bound) {
		return protocol.DLQReplayResult{}, q.s.limitReached(limitReplayIDs, "%d ids, more than %d; replay them in batches", len(ids), bound)
	}
	if err := q.s.beginRequest(); err != nil {
		return protocol.DLQReplayResult{}, err
	}
	defer q.s.requests.Done()
	return q.s.replayAll(ids, to), nil
}

// Purge removes dead letter id, or, when id is "", those f
// matches, and returns how many went. Unlike dlq.purge it tells the
// observers nothing: the console's purge never reached the journal, and
// the move of the console out of the core did not change what it does.
func (q DeadLetterQueue) Purge(id string, f store.Filter) (int, error) {
	if id != "" {
		if err := q.s.store.RemoveDeadLetter(id); err != nil {
			return 0, deadLetterError(id, err)
		}
		return 1, nil
	}
	n, err := q.s.store.PurgeDeadLetters(f)
	if err != nil {
		return 0, storeError(err)
	}
	return n, nil
}
