package protocol

// Durable subscription methods (docs/PROTOCOL.md, "Durable
// subscriptions"). subscriptions.list and subscriptions.remove are for
// operators (bub subscriptions) and need admin; subscriptions.setWaker
// needs a grant with waker: true (the spawner's).
const (
	MethodSubscriptionsList   = "subscriptions.list"
	MethodSubscriptionsRemove = "subscriptions.remove"
	MethodSubscriptionsWaker  = "subscriptions.setWaker"
)

// TopicClientWake is where the bus asks a waker to start an away durable
// subscriber: a message is held for it. The payload is a ClientEvent
// with Event EventWake, ClientID the owner, Waker the waker, Pattern the
// subscription and Reason ReasonWakeMessage.
const (
	TopicClientWake   = "system:client.wake"
	EventWake         = "wake"
	ReasonWakeMessage = "message"
)

// SubscriptionsListParams are the params of subscriptions.list: a page
// of the durable subscriptions, in clientId then pattern order. ClientID
// and Identity select exactly; Topic selects those whose pattern matches
// it. Empty fields select everything.
type SubscriptionsListParams struct {
	ClientID string `json:"clientId,omitempty"`
	Identity string `json:"identity,omitempty"`
	Topic    string `json:"topic,omitempty"`
	Cursor   string `json:"cursor,omitempty"`
	Limit    int    `json:"limit,omitempty"`
}

// DurableSubscription is one durable subscription as subscriptions.list
// shows it.
type DurableSubscription struct {
	ClientID string `json:"clientId"`
	Identity string `json:"identity,omitempty"`
	Pattern  string `json:"pattern"`
	Policy   Policy `json:"policy"`
	Fallback bool   `json:"fallback,omitempty"`
	Created  string `json:"created"`
	// Away is true while the owner has no connection; Held counts the
	// messages held for the owner (for all its durable subscriptions).
	Away  bool   `json:"away"`
	Held  int    `json:"held"`
	Waker string `json:"waker,omitempty"`
}

// SubscriptionsListResult is a page of durable subscriptions;
// NextCursor is empty on the last page.
type SubscriptionsListResult struct {
	Subscriptions []DurableSubscription `json:"subscriptions"`
	NextCursor    string                `json:"next_cursor,omitempty"`
}

// SubscriptionsRemoveParams name the durable subscription to end: its
// owner and its pattern, exactly as subscribed.
type SubscriptionsRemoveParams struct {
	ClientID string `json:"clientId"`
	Topic    string `json:"topic"`
}

// SubscriptionsWakerParams are the params of subscriptions.setWaker: the
// caller becomes the waker of ClientID, or stops being it with Clear.
type SubscriptionsWakerParams struct {
	ClientID string `json:"clientId"`
	Clear    bool   `json:"clear,omitempty"`
}
