package protocol

// The BCP gateway's events for operators (docs/BCP.md, "Events for
// operators"): each channel's account after every charge and reset, and
// each validation failure and anomaly. The gateway publishes them; the
// bus's console reads them as it routes them. They carry codes, kinds,
// counts and the definitions' names, never a Reader's text.
const (
	// TopicBCPEvents is the prefix of the events' topics; the gateway's
	// grant publishes TopicBCPEvents+".*".
	TopicBCPEvents = "system:bcp"
	// TopicBCPBudget carries TypeBCPChannelBudget.
	TopicBCPBudget = TopicBCPEvents + ".budget"
	// TopicBCPValidation carries TypeBCPValidationFailed and
	// TypeBCPAnomaly.
	TopicBCPValidation = TopicBCPEvents + ".validation"

	TypeBCPChannelBudget    = "bcp_channel_budget"
	TypeBCPValidationFailed = "bcp_validation_failed"
	TypeBCPAnomaly          = "bcp_anomaly"
)

// BCPChannelBudget is bcp_channel_budget: a channel's account in the
// Controller's current session, after a charge ("charge") or a session
// start ("reset").
type BCPChannelBudget struct {
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

// BCPValidationEvent is bcp_validation_failed (a Reader's answer or
// publish the validator refused, with its code) or bcp_anomaly (a valid
// one with anomalies, counted by kind). QueryID is the gateway's random
// id, and SubscriptionID one of the definitions'; neither is the
// Reader's.
type BCPValidationEvent struct {
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
	Anomalies map[string]int `json:"anomalies,omitempty"`
	At        string         `json:"at"`
}
