package protocol

import (
	"encoding/json"
	"time"
)

// Dead-letter queue administration methods, for operators (bub dlq).
const (
	MethodDLQList   = "dlq.list"
	MethodDLQGet    = "dlq.get"
	MethodDLQReplay = "dlq.replay"
	MethodDLQPurge  = "dlq.purge"
)

// DeliveryAttempt is one attempt recorded on a dead letter.
type DeliveryAttempt struct {
	At    time.Time `json:"at"`
	Error string    `json:"error,omitempty"`
}

// DeadLetter is a message the bus gave up delivering.
type DeadLetter struct {
	ID           string            `json:"id"`
	MessageID    string            `json:"messageId"`
	Topic        string            `json:"topic"`
	Payload      json.RawMessage   `json:"payload"`
	From         string            `json:"from"`
	Meta         json.RawMessage   `json:"meta,omitempty"`
	ClientID     string            `json:"client_id,omitempty"`
	Subscription string            `json:"subscription,omitempty"`
	Reason       string            `json:"reason"`
	Attempts     []DeliveryAttempt `json:"attempts"`
	PublishedAt  time.Time         `json:"published_at"`
	FirstAttempt time.Time         `json:"first_attempt"`
	LastAttempt  time.Time         `json:"last_attempt"`
	DeadAt       time.Time         `json:"dead_at"`
}

// DLQFilter selects dead letters: by topic pattern, reason, and the time
// they were dead-lettered (Since inclusive, Until exclusive). Empty fields
// select everything.
type DLQFilter struct {
	Topic  string    `json:"topic,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	Until  time.Time `json:"until,omitzero"`
}

// DLQListParams are the params of dlq.list.
type DLQListParams struct {
	DLQFilter
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// DLQListResult is a page of dead letters, oldest first; NextCursor is
// empty on the last page.
type DLQListResult struct {
	Entries    []DeadLetter `json:"entries"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

// DLQGetParams are the params of dlq.get.
type DLQGetParams struct {
	ID string `json:"id"`
}

// Replay targets.
const (
	ReplayToTopic      = "topic"      // publish again to the message's topic, through routing
	ReplayToSubscriber = "subscriber" // deliver again to the subscriber it was meant for
)

// DLQReplayParams are the params of dlq.replay. To defaults to "topic".
type DLQReplayParams struct {
	IDs []string `json:"ids"`
	To  string   `json:"to,omitempty"`
}

// DLQReplayOutcome is what became of one replayed entry. The entry left the
// queue only when Accepted is true.
type DLQReplayOutcome struct {
	ID       string `json:"id"`
	Accepted bool   `json:"accepted"`
	// Result is the routing result of a replay to the topic.
	Result *SendMessageResult `json:"result,omitempty"`
	Error  string             `json:"error,omitempty"`
}

// DLQReplayResult is the result of dlq.replay, one outcome per id.
type DLQReplayResult struct {
	Outcomes []DLQReplayOutcome `json:"outcomes"`
}

// DLQPurgeParams are the params of dlq.purge: one entry by ID, every entry
// matching a filter, or everything with All. An empty request is refused,
// so nothing is purged by accident.
type DLQPurgeParams struct {
	ID string `json:"id,omitempty"`
	DLQFilter
	All bool `json:"all,omitempty"`
}

// DLQPurgeResult says how many entries were removed.
type DLQPurgeResult struct {
	Purged int `json:"purged"`
}
