package peer

import "errors"

// Errors of calls on a Conn (Subscribe, Unsubscribe, SendMessage, Ping).
// Errors the bus answers are *protocol.Error values instead.
var (
	// ErrDisconnected means the Conn has no connection to the bus: the
	// call was not sent, or the connection dropped before its answer
	// came, so whether the bus acted on it is unknown. While the Conn is
	// reconnecting a later call may succeed.
	ErrDisconnected = errors.New("peer: not connected to the bus")
	// ErrClosed means Close was called; the Conn cannot be used again.
	ErrClosed = errors.New("peer: connection closed")
	// ErrCallTimeout means the bus did not answer within
	// Options.CallTimeout. The error also matches
	// context.DeadlineExceeded.
	ErrCallTimeout = errors.New("peer: call timed out")
	// ErrMessageTooBig means SendMessage refused a message larger than
	// the bus's maxMessageBytes (Conn.Limits) without sending it: the bus
	// would have closed the connection with 1009 and no answer.
	ErrMessageTooBig = errors.New("peer: message too big for the bus")
	// ErrUnauthorized means the bus refused the WebSocket upgrade (HTTP
	// 401): the credential (Options.Token) is missing, unknown, expired
	// or revoked. The bus's log says which; the peer is not told.
	ErrUnauthorized = errors.New("peer: the bus did not accept the credential (HTTP 401)")
)

// Reasons a Conn ends for good, reported by Conn.Err.
var (
	// ErrTakenOver means the bus closed the connection because a newer
	// connection initialized with the same clientId. The Conn does not
	// reconnect, which would only take the identity back and forth.
	ErrTakenOver = errors.New("peer: clientId taken over by a newer connection")
	// ErrRevoked means the bus closed the connection because, after a
	// reload of its configuration, the credential is no longer accepted
	// or no longer allows the clientId or a subscription. Reconnecting
	// with the same credential would be refused, so the Conn does not.
	ErrRevoked = errors.New("peer: credential revoked or narrowed by the bus's operator")
	// ErrRefused means a reconnect found the bus refusing the credential
	// (ErrUnauthorized, or initialize or a re-subscription answered
	// unauthorized or forbidden), as after a restart with auth turned on
	// or a key rotated. Trying again would be refused alike, every few
	// seconds forever, so the Conn ends unless
	// Options.RetryUnauthorized; the error wraps the bus's answer.
	ErrRefused = errors.New("peer: the bus refused the credential on reconnecting")
)
