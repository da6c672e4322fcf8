package bus

import (
	"bytes"
	"encoding/json"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// What happens to messages, told to the observers (extend.go).

// observers are the Observers the add-ons registered (Server.Observe),
// in the order registered, and what tells them: an emitter for each
// thing that happens to a message, which the rest of the core calls.
// The list is filled in while the server is extended and only read
// after, so the emitters take no lock.
type observers []Observer

// notify hands ev to every observer.
func (obs observers) notify(ev Event) {
	for _, o := range obs {
		o.Observe(ev)
	}
}

// correlationOf is meta.correlation_id, if meta has one; the look for the
// key spares the decode to messages without it.
func correlationOf(meta json.RawMessage) string {
	if len(meta) == 0 || !bytes.Contains(meta, []byte(`"correlation_id"`)) {
		return ""
	}
	var m struct {
		CorrelationID any `json:"correlation_id"`
	}
	if json.Unmarshal(meta, &m) != nil {
		return ""
	}
	if s, ok := m.CorrelationID.(string); ok {
		return s
	}
	return ""
}

// messageEvent is an event of kind about m, with the fields every event
// of a message carries.
func messageEvent(kind string, m *store.Message) protocol.JournalEvent {
	return protocol.JournalEvent{Kind: kind, MessageID: m.ID, Topic: m.Topic, CorrelationID: correlationOf(m.Meta)}
}

// chainIDs is the clientIds of chain, in order.
func chainIDs(chain []*subscription) []string {
	ids := make([]string, len(chain))
	for i, sub := range chain {
		ids[i] = sub.to.held().clientID
	}
	return ids
}

// The emitters below each do nothing, and allocate nothing, when nobody
// observes.

// emitAccepted records that c's publish of m was accepted, from
// remote (c's own address when empty).
func (obs observers) emitAccepted(c *conn, m *store.Message, remote string) {
	if len(obs) == 0 {
		return
	}
	if remote == "" {
		remote = c.remote
	}
	ev := messageEvent(protocol.JournalAccepted, m)
	ev.From, ev.Identity, ev.Remote, ev.API = m.From, m.Publisher, remote, apiOf(c)
	obs.notify(Event{JournalEvent: ev, Message: m})
}

// emitRouted records the chain a message was routed to; reason says
// why it is empty.
func (obs observers) emitRouted(kind string, m *store.Message, chain []*subscription, reason string) {
	if len(obs) == 0 {
		return
	}
	ev := messageEvent(kind, m)
	ev.Chain, ev.Reason = chainIDs(chain), reason
	obs.notify(Event{JournalEvent: ev, Message: m})
}

// emitDelivery records one delivery attempt and its answer.
func (obs observers) emitDelivery(d *delivery, outcome string, err error) {
	if len(obs) == 0 {
		return
	}
	ev := messageEvent(protocol.JournalDelivery, d.Message)
	ev.ClientID, ev.Subscription, ev.Attempt, ev.Outcome = d.ClientID, d.Subscription, d.Attempt, outcome
	if err != nil {
		ev.Error = err.Error()
	}
	obs.notify(Event{JournalEvent: ev})
}

// emitPending records pending work: a retry scheduled or a hold.
func (obs observers) emitPending(p *store.Pending) {
	if len(obs) == 0 {
		return
	}
	kind := protocol.JournalRetryScheduled
	if p.Kind == store.KindHold {
		kind = protocol.JournalHeld
	}
	ev := messageEvent(kind, &p.Message)
	ev.ClientID, ev.Subscription, ev.NextAt = p.ClientID, p.Subscription, p.NextAt
	if p.Kind != store.KindHold {
		ev.Attempt = len(p.Attempts) + 1
	}
	obs.notify(Event{JournalEvent: ev})
}

// emitDeadLetter records what became of dead letter id: dead-lettered
// (reason), replayed (to) or purged.
func (obs observers) emitDeadLetter(kind string, d *store.DeadLetter, id, reason string) {
	if len(obs) == 0 {
		return
	}
	ev := messageEvent(kind, &d.Message)
	ev.ClientID, ev.Subscription, ev.DeadLetterID, ev.Reason = d.ClientID, d.Subscription, id, reason
	ev.Attempt = len(d.Attempts)
	obs.notify(Event{JournalEvent: ev})
}

// maxPurgeReported bounds the purged dead letters one purge reports
// to the observers: more would not fit the default journal anyway.
const maxPurgeReported = 100000

// emitPurging reads the dead letters a purge is about to remove, the
// one id or those f matches, and returns what reports them once the
// purge is done. A dead letter added while the purge runs may go
// unreported; the journal is a window, not an audit log. st is the
// store the dead letters are purged from.
func (obs observers) emitPurging(st Store, f store.Filter, id string) (purged func()) {
	if len(obs) == 0 {
		return func() {}
	}
	var gone []*store.DeadLetter
	// keep holds what the events need of d: not its payload or attempts,
	// so that purging a queue of a gigabyte does not read it all into
	// memory at once.
	keep := func(d *store.DeadLetter) {
		gone = append(gone, &store.DeadLetter{ID: d.ID, ClientID: d.ClientID, Subscription: d.Subscription,
			Message: store.Message{ID: d.Message.ID, Topic: d.Message.Topic, Meta: d.Message.Meta}})
	}
	if id != "" {
		if d, err := st.GetDeadLetter(id); err == nil {
			keep(d)
		}
	} else {
		for cursor := ""; len(gone) < maxPurgeReported; {
			page, next, err := st.ListDeadLetters(f, cursor, 0)
			if err != nil {
				break
			}
			for _, d := range page {
				keep(d)
			}
			if next == "" {
				break
			}
			cursor = next
		}
	}
	return func() {
		for _, d := range gone {
			obs.emitDeadLetter(protocol.JournalPurged, d, d.ID, "")
		}
	}
}

// apiOf is how c reached the bus: the HTTP API's publishers have no
// stream.
func apiOf(c *conn) string {
	if c.stream == nil {
		return "http"
	}
	return "websocket"
}
