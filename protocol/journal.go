package protocol

import (
	"encoding/json"
	"time"
)

// Kinds of a JournalEvent: what happened to a message (docs/PROTOCOL.md,
// "Message journal").
const (
	// JournalAccepted: the bus accepted a publish (From, Identity,
	// Remote, API say by whom and from where).
	JournalAccepted = "accepted"
	// JournalRouted: the message was routed; Chain lists its
	// subscribers in order, empty with Reason no_subscribers when nobody
	// subscribed and it was not held.
	JournalRouted = "routed"
	// JournalDelivery: one delivery attempt (ClientID, Subscription,
	// Attempt) and its Outcome: processed, not_processed, rejected, or a
	// failure (timeout, disconnected, error, bad_result,
	// subscriber_gone) with Error.
	JournalDelivery = "delivery"
	// JournalRetryScheduled: another attempt for ClientID is due at
	// NextAt.
	JournalRetryScheduled = "retry_scheduled"
	// JournalHeld: the message waits for a subscriber until NextAt.
	JournalHeld = "held"
	// JournalWoken: a held message was routed again, to Chain.
	JournalWoken = "woken"
	// JournalDeadLettered: the message went to the dead-letter queue as
	// DeadLetterID, for Reason.
	JournalDeadLettered = "dead_lettered"
	// JournalReplayed: an admin replayed dead letter DeadLetterID, to
	// its topic or its subscriber (Reason).
	JournalReplayed = "replayed"
	// JournalPurged: an admin purged dead letter DeadLetterID.
	JournalPurged = "purged"
)

// JournalEvent is one entry of the message journal, as GET /v1/events
// and /v1/events/stream give it. Fields that do not apply to its Kind
// are left out.
type JournalEvent struct {
	// Cursor identifies the event: pass it as after= (or Last-Event-ID)
	// to read what follows it.
	Cursor string    `json:"cursor"`
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	// Node is the cluster node that recorded the event; empty on a bus
	// that is no cluster.
	Node      string `json:"node,omitempty"`
	MessageID string `json:"messageId"`
	Topic     string `json:"topic"`
	// CorrelationID is the message's meta.correlation_id: the id of the
	// message it answers.
	CorrelationID string `json:"correlationId,omitempty"`
	// From is the publisher's clientId, Identity its credential, Remote
	// its address, API "websocket" or "http" (accepted).
	From     string `json:"from,omitempty"`
	Identity string `json:"identity,omitempty"`
	Remote   string `json:"remote,omitempty"`
	API      string `json:"api,omitempty"`
	// Chain is the subscribers' clientIds, in routing order (routed,
	// woken).
	Chain []string `json:"chain,omitempty"`
	// ClientID and Subscription name the subscriber of a delivery, a
	// retry or a dead letter.
	ClientID     string    `json:"clientId,omitempty"`
	Subscription string    `json:"subscription,omitempty"`
	Attempt      int       `json:"attempt,omitempty"`
	Outcome      string    `json:"outcome,omitempty"`
	Error        string    `json:"error,omitempty"`
	NextAt       time.Time `json:"nextAt,omitzero"`
	Reason       string    `json:"reason,omitempty"`
	DeadLetterID string    `json:"deadLetterId,omitempty"`
	// Payload is the message's payload (accepted), only on a bus run
	// with --journal-payloads.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// JournalPage is the answer of GET /v1/events: the events after the
// cursor asked for that match the query, oldest first, at most limit.
// Next is the cursor to ask with for the following page (it may be past
// the last event returned: events the query does not match are skipped);
// More says whether events were left for that page. Gap says that events
// after the cursor asked for had already been dropped (retention), so
// the page starts at the oldest one still kept. On a node of a cluster
// the page is the whole cluster's, merged by time, and Next is a cursor
// of every node's place (docs/PROTOCOL.md, "Message journal").
type JournalPage struct {
	Events []JournalEvent `json:"events"`
	Next   string         `json:"next"`
	More   bool           `json:"more"`
	Gap    bool           `json:"gap,omitempty"`
	// Missing, on a node of a cluster, names the nodes that did not
	// answer in time (dead, cut off, or slow): their events are not in
	// this page, and the next page asks them again.
	Missing []string `json:"missing,omitempty"`
}
