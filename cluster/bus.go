package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/drain"
)

// ForBus returns the bus's view of a node of the cluster opts describe,
// for bus.Options.Cluster: the node starts when the bus does (bus.New)
// and leaves when it shuts down. A zero Logger or MaxMessageBytes is the
// bus's.
func ForBus(opts *Options) bus.Cluster {
	return &busNode{opts: *opts, started: make(chan struct{})}
}

// busNode is a Node as a bus.Cluster.
type busNode struct {
	opts Options
	// node is set once started is closed: Start already runs the
	// liveness that may have the bus take a node's work over.
	node    *Node
	started chan struct{}

	// removals are those made off the bus's path, which Leave waits
	// for; once it has begun, Close removes every key of the node.
	removals drain.Group
}

// removalTimeout bounds one removal made off the bus's path. JetStream
// answers in milliseconds when it has a quorum.
const removalTimeout = 10 * time.Second

// goAsync runs f, bounded by removalTimeout, on a goroutine Leave waits
// for, unless the node is leaving already.
func (b *busNode) goAsync(f func(ctx context.Context)) {
	b.removals.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), removalTimeout)
		defer cancel()
		f(ctx)
	})
}

var (
	_ bus.Cluster        = (*busNode)(nil)
	_ bus.Store          = (*Store)(nil)
	_ bus.SharedDurables = (*Store)(nil)
)

// StoreOf is the store of c, a node ForBus made, once the bus has
// joined the cluster (an add-on's Extend and on), for an add-on that
// keeps its records in the cluster beside the bus's: nil before, or for
// a Cluster ForBus did not make.
func StoreOf(c bus.Cluster) *Store {
	b, ok := c.(*busNode)
	if !ok || b.node == nil {
		return nil
	}
	return b.node.Store()
}

func (b *busNode) Names() (string, string) { return b.opts.Name, b.opts.NodeID }

func (b *busNode) Join(ctx context.Context, j *bus.ClusterJoin) (*bus.ClusterStores, error) {
	opts := b.opts
	if opts.Logger == nil {
		opts.Logger = j.Logger
	}
	if opts.MaxMessageBytes == 0 {
		opts.MaxMessageBytes = j.MaxMessageBytes
	}
	h := j.Handler
	node, err := Start(ctx, &opts, Handler{
		ApplySubscription: func(ch SubscriptionChange) {
			h.ApplySubscription(bus.SubscriptionChange{
				Key: ch.Key, Revision: ch.Revision, Deleted: ch.Deleted, Subscription: bus.SharedSubscription(ch.Subscription),
			})
		},
		TakenOver:    h.TakenOver,
		ClaimRemoved: h.ClaimRemoved,
		Deliver: func(ctx context.Context, d *Delivery) ([]byte, error) {
			return h.Deliver(ctx, d), nil
		},
		Survey:   h.Survey,
		NodeDown: h.NodeDown,
	})
	if err != nil {
		return nil, err
	}
	b.node = node
	close(b.started)
	if err := registerAll(j.Registry,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bub_cluster_sync_timeouts_total",
			Help: "Subscribes and unsubscribes answered before every live node confirmed them (a node dying, or a watch recovering)."},
			func() float64 { return float64(node.SyncTimeouts()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bub_cluster_nodes_live", Help: "Nodes of the cluster this node hears heartbeats from, itself included."},
			func() float64 { return float64(len(node.Live())) }),
	); err != nil {
		_ = node.Close(ctx)
		return nil, err
	}
	st := node.Store()
	return &bus.ClusterStores{Store: st, Keys: st, Durables: st}, nil
}

// registerAll registers the node's metrics with the bus's.
func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("cluster: register metrics: %w", err)
		}
	}
	return nil
}

func (b *busNode) PutSubscription(ctx context.Context, s bus.SharedSubscription) (string, uint64, error) {
	key := SubscriptionKey(b.opts.NodeID, s.Conn, s.Pattern)
	rev, err := b.node.PutSubscription(ctx, Subscription(s))
	return key, rev, err
}

func (b *busNode) PutDurableSubscription(ctx context.Context, s bus.SharedSubscription, last uint64) (string, uint64, error) {
	s.Node = ""
	if s.Conn != 0 {
		s.Node = b.opts.NodeID
	}
	return b.node.PutDurableSubscription(ctx, Subscription(s), last)
}

func (b *busNode) DeleteSubscription(ctx context.Context, key string) (uint64, error) {
	rev, err := b.node.deleteSubscription(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("cluster: delete subscription %s: %w", key, err)
	}
	return rev, nil
}

func (b *busNode) DropSubscriptions(keys []string) {
	b.goAsync(func(ctx context.Context) {
		for _, key := range keys {
			if _, err := b.DeleteSubscription(ctx, key); err != nil && !errors.Is(err, ErrClosed) {
				b.node.log.Error("cluster: could not remove a closed connection's subscription from the order", "key", key, "err", err)
			}
		}
	})
}

func (b *busNode) Sync(ctx context.Context, rev uint64) error { return b.node.Sync(ctx, rev) }

func (b *busNode) ClaimClient(ctx context.Context, clientID string, conn uint64) error {
	_, err := b.node.ClaimClient(ctx, clientID, conn)
	return err
}

func (b *busNode) ReleaseClient(clientID string, conn uint64) {
	b.goAsync(func(ctx context.Context) {
		if err := b.node.ReleaseClient(ctx, clientID, conn); err != nil && !errors.Is(err, ErrClosed) {
			b.node.log.Warn("cluster: could not release a closed connection's clientId", "client", clientID, "err", err)
		}
	})
}

func (b *busNode) Deliver(ctx context.Context, node string, d *bus.RemoteDelivery) ([]byte, error) {
	return b.node.Deliver(ctx, node, d)
}

func (b *busNode) Survey(ctx context.Context, node, op string, req []byte) ([]byte, error) {
	return b.node.Survey(ctx, node, op, req)
}

// TakeOver waits for the node to have started: a node may be found dead
// while this one starts.
func (b *busNode) TakeOver(ctx context.Context, node string) ([]*store.Pending, error) {
	select {
	case <-b.started:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.node.Store().TakeOver(ctx, node)
}

func (b *busNode) Live() []string { return b.node.Live() }

func (b *busNode) Ready() error { return b.node.Ready() }

// Leave gives the removals under way until ctx ends, then closes the
// node: those still waiting fail fast.
func (b *busNode) Leave(ctx context.Context) error {
	_ = b.removals.Close(ctx) // those still waiting fail fast in Close
	return b.node.Close(ctx)
}

// Crash stops the node as kill -9 would look to the others (Node.Crash),
// for the bus's tests.
func (b *busNode) Crash() { b.node.Crash() }
