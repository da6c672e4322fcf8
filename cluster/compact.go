package cluster

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Every delete in a bucket (an unsubscribe, a closed connection, a
// settled retry or hold) leaves a marker that History 1 keeps for good,
// so a bus under steady load would grow its buckets without end. The
// acting node removes markers older than Options.MarkerAge now and then.
// Removing them is a purge of the stream, which watchers do not see: a
// node's view changes only if its watch is further behind than the
// marker's age, which is why that age is long.

// compactLoop removes old delete markers every CompactInterval while
// this node acts, until the node closes.
func (n *Node) compactLoop() {
	t := time.NewTicker(n.opts.CompactInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		if n.Acting() {
			n.compact()
		}
	}
}

// compact removes the delete markers older than MarkerAge from every
// bucket; a failure is logged and the next round tries again.
func (n *Node) compact() {
	for _, kv := range []jetstream.KeyValue{n.subs, n.clients, n.nodes, n.pending, n.toolSubs, n.durable} {
		ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
		err := n.compactBucket(ctx, kv)
		cancel()
		if err != nil && n.ctx.Err() == nil {
			n.log.Warn("cluster: could not remove old delete markers; trying again later", "bucket", kv.Bucket(), "err", err)
		}
	}
}

// compactBucket removes kv's old delete markers. Not the client's
// PurgeDeletes: it reads every value (every pending payload, every ten
// minutes), and purges a marker's whole subject, which takes with it a
// put made to the same key between its read and its purge. Here only
// the keys' metadata is read, and each purge stops at the marker's own
// revision.
func (n *Node) compactBucket(ctx context.Context, kv jetstream.KeyValue) error {
	entries, err := watchAll(ctx, kv, jetstream.MetaOnly())
	if err != nil {
		return err
	}
	stream, err := n.js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return err
	}
	limit := time.Now().Add(-n.opts.MarkerAge)
	for _, e := range entries {
		if op := e.Operation(); op == jetstream.KeyValuePut || e.Created().After(limit) {
			continue
		}
		err := stream.Purge(ctx, jetstream.WithPurgeSubject(kvSubject(kv.Bucket(), e.Key())), jetstream.WithPurgeSequence(e.Revision()+1))
		if err != nil {
			return err
		}
	}
	return nil
}
