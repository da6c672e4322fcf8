package protocol

// MaxNodeIDLength bounds a cluster node's id. A cluster's journal
// cursor names every node (docs/PROTOCOL.md, "Message journal"), and
// must stay a query parameter that proxies pass.
const MaxNodeIDLength = 128

// ValidNodeID reports whether id may name a node of a cluster: 1 to
// MaxNodeIDLength letters, digits, '-' and '_'. One rule for every
// place a node id is read: it is a token of NATS subjects and a part of
// JetStream keys and pending ids (package cluster), and it appears in
// events (ClientEvent.Node, JournalEvent.Node) and in a cluster's
// journal cursors, which a reader sends back.
func ValidNodeID(id string) bool {
	if id == "" || len(id) > MaxNodeIDLength {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
