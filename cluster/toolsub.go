package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/bus/store"
)

// Tool subscriptions (docs/PROTOCOL.md, "Tool subscriptions") live in
// the bucket BUB_TOOL_SUBSCRIPTIONS, one key per subscription, the
// SHA-256 of its callback id, the value the record *store.Store writes:
// any node can check an event posted to it. Every node's bus keeps an
// index of them by thread, fed by WatchToolSubscriptions.

// PutToolSubscription records ts, once a majority of the replicas has
// it.
func (s *Store) PutToolSubscription(ts *store.ToolSubscription) error {
	v, err := store.EncodeToolSubscription(ts)
	if err != nil {
		return err
	}
	return s.write(func(ctx context.Context) error {
		_, err := s.n.putKey(ctx, bucketToolSubs, ts.Key, v, anyRevision)
		return err
	})
}

// DeleteToolSubscription removes the subscription with key. Keys are
// never used again, so the removal needs no revision.
func (s *Store) DeleteToolSubscription(key string) error {
	return s.write(func(ctx context.Context) error {
		_, err := s.n.deleteKey(ctx, bucketToolSubs, key, anyRevision)
		return err
	})
}

// GetToolSubscription returns the subscription with key, nil when there
// is none, as the bucket's leader has it (leaderGet): an event that
// comes to a node just after a cancel on another is refused.
func (s *Store) GetToolSubscription(key string) (*store.ToolSubscription, error) {
	ctx, cancel := s.opContext()
	defer cancel()
	v, err := s.leaderGet(ctx, bucketToolSubs, kvSubject(bucketToolSubs, key))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read tool subscription: %w", s.n.explain(err))
	}
	return store.DecodeToolSubscription([]byte(key), v)
}

// ToolSubscriptions returns every active tool subscription.
func (s *Store) ToolSubscriptions() ([]*store.ToolSubscription, error) {
	ctx, cancel := s.opContext()
	defer cancel()
	entries, err := watchAll(ctx, s.n.toolSubs)
	if err != nil {
		return nil, fmt.Errorf("read tool subscriptions: %w", err)
	}
	var all []*store.ToolSubscription
	for _, e := range entries {
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		ts, err := store.DecodeToolSubscription([]byte(e.Key()), e.Value())
		if err != nil {
			return nil, err
		}
		all = append(all, ts)
	}
	return all, nil
}

// WatchToolSubscriptions calls apply with every subscription the bucket
// holds, before it returns, then with each change any node makes, for
// the node's life: ts is nil for a removal of key. A record that does
// not decode is logged and skipped.
func (s *Store) WatchToolSubscriptions(ctx context.Context, apply func(key string, ts *store.ToolSubscription)) error {
	return s.n.startWatch(ctx, s.n.toolSubs, bucketToolSubs, false, func(e jetstream.KeyValueEntry, _ bool) {
		if e.Operation() != jetstream.KeyValuePut {
			apply(e.Key(), nil)
			return
		}
		ts, err := store.DecodeToolSubscription([]byte(e.Key()), e.Value())
		if err != nil {
			s.n.log.Error("cluster: a tool subscription record does not decode; skipped", "bucket", bucketToolSubs, "err", err)
			return
		}
		apply(e.Key(), ts)
	})
}
