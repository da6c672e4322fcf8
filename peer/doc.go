// Package peer is the Go client of bub-bus: the SDK that agents, chat
// bridges, the bub CLI and the BCP gateway use to talk to the bus.
//
// Start with Dial, which connects and initializes a Conn, or with DialEnv,
// which does the same from an agent's environment (BUB_BUS_URL,
// BUB_AGENT_ID, BUB_DEFAULT_TOPIC) and subscribes agent:{BUB_AGENT_ID}.
// Then Conn.Subscribe registers a Handler for a topic pattern, and
// Conn.SendMessage publishes a message and returns the subscribers' acks.
//
// # Handlers
//
// The bus delivers each message with a processMessage call, which the Conn
// answers with the Result of the Handler registered for the pattern that
// matched. Handlers run on goroutines of their own, never on the
// connection's read loop, so a handler may itself call SendMessage (A sends
// to B, whose handler sends to A) without deadlock. At most
// Options.MaxConcurrentHandlers run at once; a delivery beyond that bound is
// answered at once with ShouldRetry instead of waiting. A subscription
// with SubscribeOptions.MaxConcurrentHandlers has a bound of its own, so
// that handlers of other subscriptions that block cannot crowd it out.
// A handler that
// knows a message can never succeed answers Result.Reject, and the bus
// puts it in the dead-letter queue at once, with the handler's reason. A
// handler that panics is answered with a JSON-RPC error; the process
// keeps running.
// A handler's context ends a little before the bus stops waiting for its
// answer (see Options.HandlerTimeout).
//
// Payloads travel byte for byte both ways: SendMessage writes raw JSON
// (json.RawMessage or []byte) as given, and a Delivery's Payload and Meta
// are the publisher's bytes, key order, spacing and escapes included.
//
// # Reconnecting
//
// When the connection drops, the Conn reconnects with capped exponential
// backoff and jitter, initializes again with the same clientId, and
// re-subscribes every pattern in the order it was first subscribed, so
// last-match-wins routing is what it was once the last pattern is back
// (while they come back one by one, a message may meet an older
// subscription first). Given several URLs (the nodes of a cluster, see
// Dial), it tries the node after the one it lost first, then the others
// in turn, and waits the backoff only after a round that reached none; it
// subscribes again on whichever node answers. While it is disconnected, calls fail at once with
// ErrDisconnected rather than wait; subscriptions are not queued. Messages
// published to the Conn's patterns while it was away are not delivered to
// it by this package; redelivery is the bus's business.
//
// A Conn does not reconnect after Close, after Options.NoReconnect, or
// after the bus closed it because a newer connection took over its
// clientId (ErrTakenOver): the newer connection is the one the bus wants.
// Nor does it go on after a reconnect the bus refused for its credential
// (ErrRefused), unless Options.RetryUnauthorized: the same token would be
// refused every time. Done and Err report that end.
//
// # Errors
//
// Errors the bus answers come back as *protocol.Error, wrapped with the
// method and topic; use errors.As or protocol.CodeOf to read the code.
// Conditions on the client side are the sentinels in errors.go. Every call
// is bounded by Options.CallTimeout as well as by its context.
package peer
