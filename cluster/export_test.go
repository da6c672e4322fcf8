package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/bus/store"
)

// Buckets, for tests: the subscription order's and the idempotency
// keys'.
const (
	BucketSubs        = bucketSubs
	BucketIdempotency = bucketIdempotency
)

// Node returns the node s is the store of.
func (s *Store) Node() *Node { return s.n }

// DropBucket deletes bucket's stream. Until RemakeBucket makes it again,
// JetStream answers a write to the bucket as it does while the stream
// has no leader, around a node's death: nobody responds. In process, a
// node's death does not show that (the embedded server hands its
// leaderships over as it shuts down), so tests of writes that ride
// elections make the outage this way.
func DropBucket(ctx context.Context, n *Node, bucket string) error {
	return n.js.DeleteStream(ctx, "KV_"+bucket)
}

// RemakeBucket makes bucket again, empty, as createBuckets made it.
func RemakeBucket(ctx context.Context, n *Node, bucket string) error {
	cfg := jetstream.KeyValueConfig{Bucket: bucket, History: 1, Storage: jetstream.FileStorage, Replicas: n.replicas}
	if bucket == bucketIdempotency {
		cfg.LimitMarkerTTL = idempotencyMarkerTTL
	}
	_, err := n.js.CreateKeyValue(ctx, cfg)
	return err
}

// Deafen makes a node started with o drop the heartbeats of the peers
// deaf names (while it says so), as a partition between them would.
func Deafen(o *Options, deaf func(peer string) bool) { o.deaf = deaf }

// OnRemoving has a node started with o call removing before each try to
// remove a dead peer's keys, and what it returns with the try's result.
func OnRemoving(o *Options, removing func(peer string) (tried func(error))) { o.removing = removing }

// Registered reports whether node is registered in BUB_NODES, as n
// reads it from the bucket's leader.
func Registered(ctx context.Context, n *Node, node string) (bool, error) {
	_, _, err := n.store.leaderGetSeq(ctx, bucketNodes, kvSubject(bucketNodes, node))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// CheckNodesAt runs n's liveness check as its heartbeat loop does, with
// now for the time: a now far past the last check is a node whose
// process did not run in between.
func CheckNodesAt(n *Node, now time.Time) { n.checkNodes(now) }
