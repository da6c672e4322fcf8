package cluster

// Crash stops the node as a crash would look to the rest of the cluster:
// the embedded server and the connection go at once, and no key is
// removed, so the others notice only by the missing heartbeats.
func (n *Node) Crash() {
	n.closeOnce.Do(func() { n.shutdown(false) })
}
