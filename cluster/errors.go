package cluster

import (
	"errors"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
)

// Errors of Start and of the Node's operations. Each is wrapped with
// what was being done and on which node, so test with errors.Is. Those
// the bus tells apart are the bus's own (bus.Cluster).
var (
	// ErrClosed is returned by operations on a Node after Close.
	ErrClosed = bus.ErrClusterClosed

	// ErrNodeGone is returned by Deliver and Survey when no node
	// answers on the target's subject: the node is not running (it died,
	// or left) or never existed.
	ErrNodeGone = bus.ErrNodeGone

	// ErrDeliveryTimeout is returned by Deliver and Survey when the
	// target node did not answer before the context ended. The node may
	// also have died meanwhile.
	ErrDeliveryTimeout = bus.ErrRemoteTimeout

	// ErrTakenOver is returned by ClaimClient when a claim by another
	// connection was written after this one while it was being made:
	// the other connection owns the clientId.
	ErrTakenOver = bus.ErrClaimLost
	// ErrRevisionChanged: a write made only over a given revision found
	// another (PutDurableSubscription).
	ErrRevisionChanged = bus.ErrRevisionChanged

	// ErrDeliveryFailed is returned by Deliver when the target node's
	// Deliver handler returned an error; its text follows.
	ErrDeliveryFailed = errors.New("cluster: remote delivery failed")

	// ErrSurveyFailed is returned by Survey when the node's Survey
	// handler returned an error (or it has none); its text follows.
	ErrSurveyFailed = errors.New("cluster: remote survey failed")

	// ErrSyncTimeout is returned by Sync when some live node did not
	// confirm a revision in time; the nodes are named.
	ErrSyncTimeout = errors.New("cluster: sync timed out")

	// ErrStoreLocked is returned by Start when another node, in this
	// process or another, runs on the same StoreDir.
	ErrStoreLocked = errors.New("locked by another process (is another node running on this directory?)")

	// ErrNoQuorum is returned by the operations that write to or read
	// from JetStream, and by Ready, when this node hears from fewer than
	// a majority of the cluster's nodes: JetStream cannot answer them
	// then. The text that follows it says how many nodes it hears, as
	// "no quorum: 1 of 3 nodes reachable".
	ErrNoQuorum = errors.New("no quorum")

	// ErrBadFrame is returned when a delivery request, or the answer to
	// a request, does not parse.
	ErrBadFrame = errors.New("cluster: malformed delivery frame")
)

// ErrNoBackup is what Store.Backup returns: a cluster's state is in
// JetStream, in no file the bus could copy. It matches store.ErrNoFile
// (errors.Is), which the bus answers with 501, and its text says what
// to do instead, for the operator who ran bub backup.
var ErrNoBackup error = noBackupError{}

type noBackupError struct{}

func (noBackupError) Error() string {
	return "a cluster node keeps its state in NATS JetStream, not in a file bub backup can copy: " +
		"copy each node's DATA_DIR/nats while that node is stopped, one node at a time, " +
		"or back up the streams KV_BUB_PENDING, KV_BUB_DURABLE and BUB_DLQ with the nats CLI (nats stream backup) through --nats-client-listen; " +
		"see \"Backing up a cluster\" in docs/CLUSTER.md"
}

func (noBackupError) Is(target error) bool { return target == store.ErrNoFile }
