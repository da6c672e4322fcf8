package protocol

// WebSocket close codes the bus sends besides the standard ones
// (1001 going away, 1008 policy violation, 1009 message too big).
// docs/PROTOCOL.md lists each with what a peer should do.
const (
	// CloseTakenOver: a newer connection initialized with this
	// connection's clientId. Do not reconnect automatically.
	CloseTakenOver = 4001
	// CloseCredentialRevoked: after a configuration reload the
	// connection's credential is no longer accepted, or it expired.
	CloseCredentialRevoked = 4003
	// ClosePermissionsChanged: after a configuration reload the
	// credential no longer allows the connection's clientId or one of its
	// subscriptions, or has become publish-only.
	ClosePermissionsChanged = 4004
	// CloseHandshakeTimeout: no initialize within the handshake
	// deadline.
	CloseHandshakeTimeout = 4005
	// CloseUnauthorized: initialize carried a credential the bus does
	// not accept (the error response precedes the close).
	CloseUnauthorized = 4006
)

// busOwnedPrefixes are the topics only the bus publishes to: its
// lifecycle and dead-letter events. No peer may publish there, whatever
// its credential, and with no auth configured too.
var busOwnedPrefixes = []string{"system:client.", "system:message."}

// BusOwnedTopic reports whether topic is one only the bus publishes to.
func BusOwnedTopic(topic string) bool {
	for _, p := range busOwnedPrefixes {
		if len(topic) >= len(p) && topic[:len(p)] == p {
			return true
		}
	}
	return false
}
