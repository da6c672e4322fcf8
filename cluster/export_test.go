package cluster

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketSubs is the bucket of the subscription order, for tests.
const BucketSubs = bucketSubs

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
	_, err := n.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, Storage: jetstream.FileStorage, Replicas: n.replicas})
	return err
}
