package gateway

import (
	"strings"
	"time"

	"github.com/bub-bus/bub/bcp"
)

// The gateway's events for operators (docs/BCP.md, "Events for
// operators"): each channel's account after every charge and reset, and
// each validation failure and anomaly, for the bus's console to show.
// They go under system:, which only a grant that names system: may
// publish or subscribe (docs/SECURITY.md): no agent can forge one, and
// no Controller can read one unless an operator grants it. They carry
// codes, kinds, counts and the definitions' names, never a Reader's text:
// what a Reader wrote reaches nobody but itself and the audit log
// (section 12).
const (
	// TopicEvents is the prefix of the events' topics; the gateway's
	// grant publishes TopicEvents+".*".
	TopicEvents = "system:bcp"
	// TopicBudgetEvents carries bcp_channel_budget.
	TopicBudgetEvents = TopicEvents + ".budget"
	// TopicValidationEvents carries bcp_validation_failed and
	// bcp_anomaly.
	TopicValidationEvents = TopicEvents + ".validation"

	TypeChannelBudget    = "bcp_channel_budget"
	TypeValidationFailed = "bcp_validation_failed"
	TypeAnomaly          = "bcp_anomaly"
)

// ChannelBudget is bcp_channel_budget: a channel's account in the
// Controller's current session, after a charge ("charge") or a session
// start ("reset").
type ChannelBudget struct {
	Type           string  `json:"type"`
	Event          string  `json:"event"`
	Controller     string  `json:"controller"`
	Reader         string  `json:"reader"`
	SpentBits      float64 `json:"spent_bits"`
	RemainingBits  float64 `json:"remaining_bits"`
	BudgetBits     float64 `json:"budget_bits"`
	Cat2Queries    int     `json:"cat2_queries"`
	MaxCat2Queries int     `json:"max_cat2_queries,omitempty"`
	Cat3Queries    int     `json:"cat3_queries"`
	MaxCat3Queries int     `json:"max_cat3_queries,omitempty"`
	At             string  `json:"at"`
}

// ValidationEvent is bcp_validation_failed (a Reader's answer or publish
// the validator refused, with its code) or bcp_anomaly (a valid one with
// anomalies, counted by kind). QueryID is the gateway's random id, and
// SubscriptionID one of the definitions'; neither is the Reader's.
type ValidationEvent struct {
	Type           string `json:"type"`
	Controller     string `json:"controller"`
	Reader         string `json:"reader"`
	QueryID        string `json:"query_id,omitempty"`
	SubscriptionID string `json:"subscription_id,omitempty"`
	Category       int    `json:"category"`
	// Code is the validator's code (too_many_words, not_in_enum, ...).
	Code string `json:"code,omitempty"`
	// AttemptsLeft is how many answers the query may still get
	// (queries only).
	AttemptsLeft *int `json:"attempts_left,omitempty"`
	// Anomalies counts the anomalies by kind (instruction, url, code,
	// invisible): no excerpt, no question.
	Anomalies map[bcp.AnomalyKind]int `json:"anomalies,omitempty"`
	At        string                  `json:"at"`
}

// isEventTopic says whether topic is one of the events': nobody need
// subscribe to them (the console reads them as the bus routes them).
func isEventTopic(topic string) bool { return strings.HasPrefix(topic, TopicEvents+".") }

// budgetEvent queues the channel's account after a charge or a reset.
func budgetEvent(t *txn, event, controller, reader string, ch *bcp.Channel, u bcp.Usage) error {
	return t.send(TopicBudgetEvents, ChannelBudget{
		Type: TypeChannelBudget, Event: event, Controller: controller, Reader: reader,
		SpentBits: float64(u.SpentBits), RemainingBits: float64(u.RemainingBits), BudgetBits: float64(ch.BudgetBits),
		Cat2Queries: u.Cat2Queries, MaxCat2Queries: ch.MaxCat2Queries, Cat3Queries: u.Cat3Queries, MaxCat3Queries: ch.MaxCat3Queries,
		At: t.now.UTC().Format(time.RFC3339Nano),
	})
}

// validationFailedEvent queues a validation failure: its code, never its
// detail, which quotes the Reader.
func validationFailedEvent(t *txn, ev ValidationEvent, code string) error {
	ev.Type, ev.Code, ev.At = TypeValidationFailed, code, t.now.UTC().Format(time.RFC3339Nano)
	return t.send(TopicValidationEvents, ev)
}

// anomalyEvent queues the anomalies of a valid response, if it has any,
// counted by kind: their excerpts stay out.
func anomalyEvent(t *txn, ev ValidationEvent, res *bcp.Result) error {
	if len(res.Anomalies) == 0 {
		return nil
	}
	ev.Type, ev.At = TypeAnomaly, t.now.UTC().Format(time.RFC3339Nano)
	ev.Anomalies = make(map[bcp.AnomalyKind]int)
	for _, a := range res.Anomalies {
		ev.Anomalies[a.Kind]++
	}
	return t.send(TopicValidationEvents, ev)
}
