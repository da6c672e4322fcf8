package bus

// What an operator's tools administer (the add-on bus/admin, the
// console): the dead-letter queue, the durable subscriptions and the
// store's backup, each in the wire's form and under the core's locks.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

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

// replay sends one dead letter again. The entry leaves the queue only once
// the replay is accepted: for a topic, once routing found a subscriber or
// held the message; for a subscriber, once the retry is stored.
func (q DeadLetterQueue) replay(id, to string, out *protocol.DLQReplayOutcome) error {
	s := q.s
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
		s.observers.emitDeadLetter(protocol.JournalReplayed, d, id, to)
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
	s.observers.emitDeadLetter(protocol.JournalReplayed, d, id, to)
	out.Accepted = true
	return nil
}

// storeError puts the store's refusals in the protocol's terms.
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
// Limits.MaxReplayIDs; it is refused once the bus drains. Its checks
// come in dlq.replay's order (docs/PROTOCOL.md), so a call wrong in two
// ways hears the same refusal at either door.
func (q DeadLetterQueue) Replay(ids []string, to string) (protocol.DLQReplayResult, error) {
	if len(ids) == 0 {
		return protocol.DLQReplayResult{}, protocol.Errorf(protocol.ErrInvalidParams, "ids is required: name at least one dead letter")
	}
	if bound := q.s.limits().MaxReplayIDs; !under(len(ids)-1, bound) {
		return protocol.DLQReplayResult{}, q.s.limitReached(limitReplayIDs, "%d ids, more than %d; replay them in batches", len(ids), bound)
	}
	to, err := replayTarget(to)
	if err != nil {
		return protocol.DLQReplayResult{}, err
	}
	if err := q.s.beginRequest(); err != nil {
		return protocol.DLQReplayResult{}, err
	}
	defer q.s.requests.Done()
	// Each on its own: one that fails says why in its outcome and the
	// others go on.
	result := protocol.DLQReplayResult{Outcomes: []protocol.DLQReplayOutcome{}}
	for _, id := range ids {
		out := protocol.DLQReplayOutcome{ID: id}
		if err := q.replay(id, to, &out); err != nil {
			out.Error = err.Error()
		}
		result.Outcomes = append(result.Outcomes, out)
	}
	return result, nil
}

// Purge removes dead letter id, or, when id is "", those f
// matches, and returns how many went. Unlike dlq.purge it tells the
// observers nothing: the console's purge never reached the journal, and
// the move of the console out of the core did not change what it does.
func (q DeadLetterQueue) Purge(id string, f store.Filter) (int, error) {
	return q.purge(id, f, false)
}

// PurgeObserved is Purge that tells the observers what goes (the
// journal's purged events), as dlq.purge does: the core alone knows
// the entries as they leave.
func (q DeadLetterQueue) PurgeObserved(id string, f store.Filter) (int, error) {
	return q.purge(id, f, true)
}

func (q DeadLetterQueue) purge(id string, f store.Filter, observed bool) (int, error) {
	purged := func() {}
	if observed {
		purged = q.s.observers.emitPurging(q.s.store, f, id)
	}
	if id != "" {
		if err := q.s.store.RemoveDeadLetter(id); err != nil {
			return 0, deadLetterError(id, err)
		}
		purged()
		return 1, nil
	}
	n, err := q.s.store.PurgeDeadLetters(f)
	if err != nil {
		return 0, storeError(err)
	}
	purged()
	return n, nil
}

// DurableSubscriptions are the bus's durable subscriptions as an
// operator administers them (subscriptions.list and
// subscriptions.remove): a snapshot in the wire's form, taken under the
// core's locks.
type DurableSubscriptions struct {
	s *Server
}

// DurableSubscriptions returns s's durable subscriptions.
func (s *Server) DurableSubscriptions() DurableSubscriptions {
	return DurableSubscriptions{s: s}
}

// List returns the page of durable subscriptions p selects (by
// clientId, identity, and a topic they match, checked by the caller),
// in clientId then pattern order after p.Cursor, with the cursor of the
// next page ("" when this was the last). A p.Limit of 0 lists 100.
func (d DurableSubscriptions) List(p protocol.SubscriptionsListParams) protocol.SubscriptionsListResult {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	all := d.s.durables.list(&p)
	result := protocol.SubscriptionsListResult{Subscriptions: all}
	if len(all) > p.Limit {
		result.Subscriptions = all[:p.Limit]
		last := all[p.Limit-1]
		result.NextCursor = listCursor(last.ClientID, last.Pattern)
	}
	return result
}

// Remove removes clientID's durable subscription to pattern and reports
// whether there was one. A connected owner loses it as by its own
// unsubscribe.
func (d DurableSubscriptions) Remove(clientID, pattern string) (bool, error) {
	s := d.s
	s.mu.Lock()
	ownerConn := s.clients[clientID]
	s.mu.Unlock()
	if ownerConn != nil {
		if sub, _, _ := ownerConn.removeSubscription(pattern); sub != nil {
			s.cl.unshareNow(sub)
		}
	}
	return s.durables.unsubscribeDurable(clientID, pattern)
}

// listCursor is the cursor after a subscription: its owner and pattern,
// which no clientId or pattern can contain a NUL of.
func listCursor(clientID, pattern string) string { return clientID + "\x00" + pattern }

// list returns the durable subscriptions p selects after its cursor, in
// clientId then pattern order: one more than p.Limit when there are more.
func (d *durables) list(p *protocol.SubscriptionsListParams) []protocol.DurableSubscription {
	s := d.server
	d.mu.Lock()
	owners := make([]*owner, 0, len(d.owners))
	for id, o := range d.owners {
		if (p.ClientID == "" || id == p.ClientID) && (p.Identity == "" || o.rec.Identity == p.Identity) && listCursor(id, "\xff") > p.Cursor {
			owners = append(owners, o)
		}
	}
	slices.SortFunc(owners, func(a, b *owner) int { return strings.Compare(a.rec.ClientID, b.rec.ClientID) })
	var out []protocol.DurableSubscription
	for _, o := range owners {
		var held int
		if d.shared != nil {
			held = d.shared.HeldCount(o.id)
		} else {
			held = s.sched.countOwner(o.id, func(string) bool { return true })
		}
		subs := slices.Clone(o.rec.Subscriptions)
		slices.SortFunc(subs, func(a, b store.DurableSubscription) int { return cmp.Compare(a.Pattern, b.Pattern) })
		for _, sub := range subs {
			if listCursor(o.id, sub.Pattern) <= p.Cursor {
				continue
			}
			if p.Topic != "" {
				pattern, err := protocol.ParsePattern(sub.Pattern)
				if err != nil || !pattern.Match(p.Topic) {
					continue
				}
			}
			_, away := o.away.subs[sub.Pattern]
			out = append(out, protocol.DurableSubscription{
				ClientID: o.id, Identity: o.rec.Identity, Pattern: sub.Pattern, Policy: protocol.Policy(sub.Policy),
				Fallback: sub.Fallback, Created: sub.Created.UTC().Format(time.RFC3339Nano), Away: away, Held: held, Waker: o.rec.Waker,
			})
			if len(out) > p.Limit {
				d.mu.Unlock()
				return out
			}
		}
	}
	d.mu.Unlock()
	return out
}

// Backup hands fn a consistent copy of the store, for GET /backup: the
// running bus holds the store's file lock, so only the bus can take the
// copy. A store kept in memory has none to give: store.ErrNoFile.
func (s *Server) Backup(fn func(store.Snapshot) error) error {
	return s.store.Backup(fn)
}
