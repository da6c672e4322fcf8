package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// Cluster is what the bus needs from a cluster of nodes (docs/CLUSTER.md):
// one subscription order every node applies alike, client claims across
// the nodes, deliveries to subscribers on other nodes, membership, and a
// store the nodes share. A bus always holds one: a single node holds one
// of its own that owns everything, so a path of the bus cannot skip the
// cluster. Package cluster implements it on NATS JetStream
// (cluster.ForBus); the bus links none of that unless an embedder does.
//
// The bus calls Names any time, Join once from New (with NewContext's
// ctx, which ends a start the operator stopped), and the other
// methods only after Join succeeded; they are called concurrently.
type Cluster interface {
	// Names returns the cluster's name and this node's id; "" for a
	// single node.
	Names() (cluster, node string)
	// Join makes this process a node of the cluster and returns the
	// stores the nodes share. Before it returns, j.Handler has applied
	// the current subscription order; from then on it hears every
	// change.
	Join(ctx context.Context, j *ClusterJoin) (*ClusterStores, error)
	// PutSubscription writes a subscription of one of this node's
	// connections to the order and returns its key and revision, the
	// key even on failure (the write may have landed). A later revision
	// wins.
	PutSubscription(ctx context.Context, s SharedSubscription) (key string, revision uint64, err error)
	// PutDurableSubscription writes a durable subscription to the order
	// under a key of its owner and pattern, which outlives connections
	// and nodes: s.Node "" while the owner is away, else this node and
	// s.Conn. s.Order is its place in the order once it has one (the
	// revision of its first put). last > 0 writes only over that
	// revision, else fails with ErrRevisionChanged.
	PutDurableSubscription(ctx context.Context, s SharedSubscription, last uint64) (key string, revision uint64, err error)
	// DeleteSubscription removes a subscription by key and returns the
	// revision of the removal.
	DeleteSubscription(ctx context.Context, key string) (revision uint64, err error)
	// DropSubscriptions removes a closed connection's subscriptions
	// from the order without waiting; Leave waits for it.
	DropSubscriptions(keys []string)
	// Sync returns once every live node has applied revision, or when
	// ctx ends; its error is only worth logging.
	Sync(ctx context.Context, revision uint64) error
	// ClaimClient records that connection conn of this node holds
	// clientID; the connection that held it, on whichever node, hears
	// TakenOver. It fails with ErrClaimLost when a later claim won
	// while this one was written.
	ClaimClient(ctx context.Context, clientID string, conn uint64) error
	// ReleaseClient removes a closed connection's claim of clientID,
	// unless a later one replaced it, without waiting; Leave waits for
	// it.
	ReleaseClient(clientID string, conn uint64)
	// Deliver asks node to deliver d to one of its connections and
	// returns what that node's ClusterHandler.Deliver answered. ctx
	// bounds the wait. Errors: ErrNodeGone, ErrRemoteTimeout.
	Deliver(ctx context.Context, node string, d *RemoteDelivery) ([]byte, error)
	// Survey asks node to answer req with its handler of op
	// (Server.OnSurvey) and returns what that node's
	// ClusterHandler.Survey answered. ctx bounds the wait. Errors:
	// ErrNodeGone, ErrRemoteTimeout, and the handler's error, with its
	// text.
	Survey(ctx context.Context, node, op string, req []byte) ([]byte, error)
	// TakeOver moves a dead node's pending work to this node and
	// returns what it moved, also when it fails part way.
	TakeOver(ctx context.Context, node string) ([]*store.Pending, error)
	// Live returns the nodes this one hears from, itself included; none
	// for a single node.
	Live() []string
	// Ready says why this node cannot serve, or nil.
	Ready() error
	// Leave leaves the cluster cleanly, so the others act at once,
	// once the removals under way are done or ctx ends. Calls made
	// meanwhile fail with ErrClusterClosed.
	Leave(ctx context.Context) error
}

// ClusterJoin is what the bus hands its cluster as it joins.
type ClusterJoin struct {
	// Handler hears what the cluster tells the bus.
	Handler ClusterHandler
	// Logger is the bus's logger.
	Logger *slog.Logger
	// MaxMessageBytes is the largest message the bus takes
	// (Options.MaxMessageBytes), which a delivery and a stored record
	// must carry.
	MaxMessageBytes int64
	// Registry takes the cluster's own metrics.
	Registry prometheus.Registerer
}

// ClusterStores are the stores a cluster's nodes share, as Join hands
// them to the bus, each typed for what the bus does with it.
type ClusterStores struct {
	// Store keeps pending work, dead letters and idempotency records.
	Store Store
	// Keys reserves an idempotency key for the one request that runs
	// it, whichever node that is.
	Keys IdempotencyReserver
	// Durables keeps the durable subscribers' records and the messages
	// each node holds for them. Nil: durable subscriptions are refused.
	Durables SharedDurables
}

// ClusterHandler is the bus's side of a cluster: what the cluster tells
// it. The bus passes its own to Cluster.Join.
type ClusterHandler interface {
	// ApplySubscription applies one change of the order; changes come
	// in revision order, from one goroutine, this node's own included.
	ApplySubscription(ch SubscriptionChange)
	// TakenOver closes connection conn of this node: another connection
	// claimed its clientID. It does not block.
	TakenOver(clientID string, conn uint64)
	// ClaimRemoved closes connection conn of this node so that its
	// client reconnects: another node presumed this one dead and removed
	// its claim of clientID. It does not block.
	ClaimRemoved(clientID string, conn uint64)
	// Deliver makes a delivery another node asked for and returns the
	// answer for that node. Its requests for one connection come in the
	// order they were sent, each once the one before is written
	// (RemoteDelivery.Written).
	Deliver(ctx context.Context, d *RemoteDelivery) []byte
	// Survey answers another node's request of op (Cluster.Survey)
	// with the add-on's handler of op.
	Survey(ctx context.Context, op string, req []byte) ([]byte, error)
	// NodeDown hears that node stopped; acting says this node takes
	// over its pending work (Cluster.TakeOver).
	NodeDown(node string, acting bool)
}

// SharedSubscription is a subscription as the cluster's order holds it.
type SharedSubscription struct {
	// Node and Conn name the connection holding it: Node is set by
	// the cluster on a put.
	Node     string
	Conn     uint64
	Pattern  string
	Policy   protocol.Policy
	Fallback bool
	ClientID string
	Identity string
	// MaxPending is the cap of the subscriber's grant on what counts
	// against its identity (0: the Limits'), which its node alone knows.
	MaxPending int
	// Durable marks a durable subscription (PutDurableSubscription);
	// Order is its place in the order, kept across its owner's moves (0
	// on its first put: then the revision is).
	Durable bool
	Order   uint64
}

// SubscriptionChange is one change of the order, as every node applies
// it.
type SubscriptionChange struct {
	// Key names the subscription: a put and its later delete carry the
	// same key.
	Key string
	// Revision is the change's place in the order.
	Revision uint64
	// Deleted is set for a removal; Subscription then has only Node and
	// Conn.
	Deleted      bool
	Subscription SharedSubscription
}

// RemoteDelivery is a message for a subscriber on another node.
type RemoteDelivery struct {
	// ClientID, Conn and Pattern name the subscription the message
	// matched, so the subscriber's node can tell whether its connection
	// still holds it.
	ClientID string
	Conn     uint64
	Pattern  string
	Attempt  uint32
	// Payload is the processMessage params, written to the subscriber
	// as they are.
	Payload []byte
	// Deadline is when the subscriber's answer is due, on this node's
	// clock; zero: whenever the subscriber's node decides. The asking
	// node sets it where its own clock for the delivery started; it
	// travels as the time left (so the hosts' clocks need not agree),
	// and the subscriber's node counts that from the request's arrival,
	// not from when its turn comes: time spent queued there counts.
	Deadline time.Time
	// Sent, on the asking side, is called once the request is on its
	// way, in the order of the node's requests: requests sent in turn
	// reach the subscriber in that order. Optional.
	Sent func()
	// Written, on the subscriber's side, is for the handler to call once
	// the message is written to the subscriber: until then, or until the
	// handler returns, the next request for the same Conn waits.
	Written func()
}

// Errors a Cluster returns, wrapped with detail.
var (
	// ErrClusterClosed: the node left or is leaving.
	ErrClusterClosed = errors.New("cluster: node closed")
	// ErrClaimLost: a later claim of the clientId won (ClaimClient).
	ErrClaimLost = errors.New("cluster: clientId taken over by a later claim")
	// ErrNodeGone: no node answers for the subscriber (Deliver), or
	// for the node asked (Survey).
	ErrNodeGone = errors.New("cluster: node gone")
	// ErrRemoteTimeout: the subscriber's node did not answer in time
	// (Deliver), or the node asked (Survey).
	ErrRemoteTimeout = errors.New("cluster: delivery timed out")
	// ErrRevisionChanged: another write came first
	// (PutDurableSubscription).
	ErrRevisionChanged = errors.New("cluster: changed by another write meanwhile")
)

// singleNode is the Cluster of a bus that is one node on its own: it
// orders subscriptions by a counter and owns every client, and there is
// no other node to deliver to or hear from. Its store keeps its durable
// subscriptions (durables.local), which no other node shares.
type singleNode struct {
	store *store.Store
	seq   atomic.Uint64
}

var _ Cluster = (*singleNode)(nil)

func (n *singleNode) Names() (string, string) { return "", "" }

func (n *singleNode) Join(context.Context, *ClusterJoin) (*ClusterStores, error) {
	return &ClusterStores{Store: n.store, Keys: localKeys{n.store}}, nil
}

func (n *singleNode) PutSubscription(context.Context, SharedSubscription) (string, uint64, error) {
	return "", n.seq.Add(1), nil
}

func (n *singleNode) PutDurableSubscription(context.Context, SharedSubscription, uint64) (string, uint64, error) {
	return "", n.seq.Add(1), nil
}

func (n *singleNode) DeleteSubscription(context.Context, string) (uint64, error) { return 0, nil }

func (n *singleNode) DropSubscriptions([]string) {}

func (n *singleNode) Sync(context.Context, uint64) error { return nil }

func (n *singleNode) ClaimClient(context.Context, string, uint64) error { return nil }

func (n *singleNode) ReleaseClient(string, uint64) {}

func (n *singleNode) Deliver(_ context.Context, node string, _ *RemoteDelivery) ([]byte, error) {
	return nil, fmt.Errorf("%w: a single node has no node %q", ErrNodeGone, node)
}

func (n *singleNode) Survey(_ context.Context, node, _ string, _ []byte) ([]byte, error) {
	return nil, fmt.Errorf("%w: a single node has no node %q", ErrNodeGone, node)
}

func (n *singleNode) TakeOver(context.Context, string) ([]*store.Pending, error) { return nil, nil }

func (n *singleNode) Live() []string { return nil }

func (n *singleNode) Ready() error { return nil }

func (n *singleNode) Leave(context.Context) error { return nil }
