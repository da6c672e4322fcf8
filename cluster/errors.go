package cluster

import (
	"errors"

	"github.com/bub-bus/bub/bus"
)

// Errors of Start and of the Node's operations. Each is wrapped with
// what was being done and on which node, so test with errors.Is. Those
// the bus tells apart are the bus's own (bus.Cluster).
var (
	// ErrClosed is returned by operations on a Node after Close.
	ErrClosed = bus.ErrClusterClosed

	// ErrNodeGone is returned by Deliver when no node answers on the
	// target's delivery subject: the node is not running (it died, or
	// left) or never existed.
	ErrNodeGone = bus.ErrNodeGone

	// ErrDeliveryTimeout is returned by Deliver when the target node took
	// the request but did not answer before the context ended. The node
	// may also have died while delivering.
	ErrDeliveryTimeout = bus.ErrRemoteTimeout

	// ErrTakenOver is returned by ClaimClient when a claim by another
	// connection was written after this one while it was being made:
	// the other connection owns the clientId.
	ErrTakenOver = bus.ErrClaimLost

	// ErrDeliveryFailed is returned by Deliver when the target node's
	// Deliver handler returned an error; its text follows.
	ErrDeliveryFailed = errors.New("cluster: remote delivery failed")

	// ErrSyncTimeout is returned by Sync when some live node did not
	// confirm a revision in time; the nodes are named.
	ErrSyncTimeout = errors.New("cluster: sync timed out")

	// ErrBadFrame is returned when a delivery request or response does
	// not parse.
	ErrBadFrame = errors.New("cluster: malformed delivery frame")
)
