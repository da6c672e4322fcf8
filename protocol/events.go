package protocol

// System topics the bus publishes its own events to. They are ordinary
// messages, from the bus's serverId (InitializeResult.ServerID), whose
// payload has a type like every other; trust one only from that sender.
const (
	TopicClientConnected    = "system:client.connected"
	TopicClientDisconnected = "system:client.disconnected"
	TopicClientSubscribed   = "system:client.subscribed"
	TopicClientUnsubscribed = "system:client.unsubscribed"
	// TopicClientBusy and TopicClientIdle report a client's first
	// delivery in flight, and its last one answered (or failed).
	TopicClientBusy   = "system:client.busy"
	TopicClientIdle   = "system:client.idle"
	TopicDeadLettered = "system:message.dead_lettered"

	// ClientEventsPattern subscribes every client lifecycle event.
	ClientEventsPattern = "system:client.*"
)

// TypeClientEvent is the payload type of every system:client.* event.
const TypeClientEvent = "client_event"

// Client lifecycle events: ClientEvent.Event, one per system:client.*
// topic.
const (
	EventConnected    = "connected"
	EventDisconnected = "disconnected"
	EventSubscribed   = "subscribed"
	EventUnsubscribed = "unsubscribed"
	EventBusy         = "busy"
	EventIdle         = "idle"
)

// ClientEvent is the payload of the system:client.* events.
type ClientEvent struct {
	Type     string `json:"type"` // always TypeClientEvent
	Event    string `json:"event"`
	ClientID string `json:"client_id"`
	// Identity is the credential's name (docs/SECURITY.md); absent on
	// an open bus.
	Identity string `json:"identity,omitempty"`
	Pattern  string `json:"pattern,omitempty"`
	// Fallback is set on subscribed and unsubscribed events only, and then
	// always sent, false included: a reader (the spawner waits for
	// fallback: false) must not have to know that a missing field means
	// false. Other events have no subscription, so no fallback.
	Fallback *bool  `json:"fallback,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Waker is set on wake events only: the clientId asked to start
	// ClientID.
	Waker     string `json:"waker,omitempty"`
	Timestamp string `json:"timestamp"`
	// Node is the cluster node the client is connected to; absent on a
	// bus that is not a cluster (docs/CLUSTER.md).
	Node string `json:"node,omitempty"`
}
