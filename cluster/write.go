package cluster

import (
	"context"
	"math"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/internal/jswrite"
)

// The node's writes to its buckets all go through publishKV, so that
// every one of them rides a JetStream election the same way.

// rideElections makes a write wait out a stream with no leader
// (jswrite.RideElections): the bus then had nowhere to keep a retry it
// had to keep (make cluster-test saw messages vanish that way).
var rideElections = jswrite.RideElections

// anyRevision is publishKV's over for a write made whatever its key
// holds; no stream's sequence reaches it.
const anyRevision = math.MaxUint64

// publishKV writes m, a put or a delete marker of a key of a bucket as
// the KV layer writes them (ADR-8: a message on $KV.<bucket>.<key>),
// riding elections, and returns its revision, once a majority has it.
// It writes only over revision over of the key (0: a key never written,
// or whose last delete marker was compacted away), failing with
// isWrongRevision otherwise, unless over is anyRevision. extra adds
// options of the message (its TTL). The KV layer's own writes (Put,
// Update, Delete) do not ride elections.
func (n *Node) publishKV(ctx context.Context, m *nats.Msg, over uint64, extra ...jetstream.PublishOpt) (uint64, error) {
	opts := append(rideElections[:len(rideElections):len(rideElections)], extra...)
	if over != anyRevision {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(over))
	}
	ack, err := n.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// kvSubject is the subject of key in bucket's stream.
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// putKey writes value under key of bucket, over revision over
// (publishKV), and returns its revision.
func (n *Node) putKey(ctx context.Context, bucket, key string, value []byte, over uint64) (uint64, error) {
	return n.publishKV(ctx, &nats.Msg{Subject: kvSubject(bucket, key), Data: value}, over)
}

// deleteKey deletes key of bucket, over revision over (publishKV), and
// returns the revision of the delete.
func (n *Node) deleteKey(ctx context.Context, bucket, key string, over uint64) (uint64, error) {
	m := &nats.Msg{Subject: kvSubject(bucket, key), Header: nats.Header{}}
	m.Header.Set(headerKVOperation, "DEL")
	return n.publishKV(ctx, m, over)
}

// isWrongRevision reports whether err is JetStream's refusal of a
// compare-and-set (jswrite.WrongLast).
func isWrongRevision(err error) bool { return jswrite.WrongLast(err) }
