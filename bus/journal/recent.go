package journal

import (
	"strconv"
	"time"

	"github.com/bub-bus/bub/protocol"
)

// The console's Messages page opens on the most recent messages, one row
// per message with its outcome, newest first, rather than on the
// journal's events oldest first: a person debugging starts from what
// just happened. The rows are made from the journal's events, walked
// from the newest back, so the newest messages cost the least.

// consoleMessage is one row of the Messages page: a message the journal
// saw accepted, and what became of it as far as the journal knows.
type consoleMessage struct {
	MessageID     string    `json:"messageId"`
	Topic         string    `json:"topic"`
	From          string    `json:"from,omitempty"`
	CorrelationID string    `json:"correlationId,omitempty"`
	Time          time.Time `json:"time"`
	Node          string    `json:"node,omitempty"`
	// Outcome is one word: delivered, retrying, held, dead_lettered,
	// no_subscribers, or pending (nothing answered yet).
	Outcome string `json:"outcome"`
	// Detail says more in words: who processed it, the dead letter.
	Detail       string `json:"detail,omitempty"`
	DeadLetterID string `json:"deadLetterId,omitempty"`
	// Attempts are the delivery attempts the journal holds.
	Attempts int `json:"attempts"`
}

// Outcomes of consoleMessage.
const (
	outcomeDelivered     = "delivered"
	outcomeRetrying      = "retrying"
	outcomeHeld          = "held"
	outcomeDeadLettered  = "dead_lettered"
	outcomeNoSubscribers = "no_subscribers"
	outcomePending       = "pending"
)

// recentMessages returns the newest limit messages q matches, newest
// first, each with its outcome. It walks the journal's events from the
// newest back: a message's later events come before its accepted event,
// which completes its row.
func (j *journal) recentMessages(limit int, q *journalQuery) []consoleMessage {
	j.mu.Lock()
	blocks := append([]*journalBlock(nil), j.blocks...)
	end := j.next
	j.mu.Unlock()
	oldest := time.Now().Add(-j.opts.MaxAge)
	// A message's kind filter would hide its other events; the row is
	// made of all of them.
	kind := q.kind
	q.kind = ""
	defer func() { q.kind = kind }()
	later := map[string]*consoleMessage{} // the rows still waiting for their accepted event
	var rows []consoleMessage
	for bi := len(blocks) - 1; bi >= 0 && len(rows) < limit; bi-- {
		b := blocks[bi]
		n := int(min(end-b.first, journalBlockSize))
		for i := n - 1; i >= 0 && len(rows) < limit; i-- {
			ev := &b.events[i]
			if !q.match(ev, oldest) {
				continue
			}
			m := later[ev.MessageID]
			if m == nil {
				m = &consoleMessage{MessageID: ev.MessageID, Outcome: outcomePending}
				later[ev.MessageID] = m
			}
			noteOutcome(m, ev)
			if ev.Kind == protocol.JournalAccepted {
				m.Topic, m.From, m.CorrelationID, m.Time, m.Node = ev.Topic, ev.From, ev.CorrelationID, ev.Time, ev.Node
				rows = append(rows, *m)
				delete(later, ev.MessageID)
			}
		}
	}
	return rows
}

// noteOutcome folds ev, seen before every earlier event of its message,
// into m: the first event that decides the outcome is the newest, and a
// dead letter or a processed delivery anywhere wins over what is left.
func noteOutcome(m *consoleMessage, ev *protocol.JournalEvent) {
	decided := m.Outcome != outcomePending
	switch ev.Kind {
	case protocol.JournalDeadLettered:
		if m.DeadLetterID == "" {
			m.Outcome, m.DeadLetterID = outcomeDeadLettered, ev.DeadLetterID
			m.Detail = "dead letter " + ev.DeadLetterID + " (" + ev.Reason + ")"
		}
	case protocol.JournalDelivery:
		m.Attempts++
		if ev.Outcome == "processed" && m.Outcome != outcomeDeadLettered {
			m.Outcome, m.Detail = outcomeDelivered, "processed by "+ev.ClientID
		}
	case protocol.JournalRetryScheduled:
		if !decided {
			m.Outcome, m.Detail = outcomeRetrying, "attempt "+strconv.Itoa(ev.Attempt)+" to "+ev.ClientID+" due "+ev.NextAt.UTC().Format(time.RFC3339)
		}
	case protocol.JournalHeld:
		if !decided {
			m.Outcome, m.Detail = outcomeHeld, "waits for a subscriber until "+ev.NextAt.UTC().Format(time.RFC3339)
		}
	case protocol.JournalRouted:
		if !decided && len(ev.Chain) == 0 {
			m.Outcome, m.Detail = outcomeNoSubscribers, "routed to nobody"
		}
	}
}
