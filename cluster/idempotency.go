package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/bus/store"
)

// Idempotency keys are shared by every node in the bucket
// BUB_IDEMPOTENCY, so that a publish retried on any node within the
// window gets the first answer (docs/PROTOCOL.md, "Idempotency-Key").
// Each key carries a TTL of its own, the time left of its window: the
// bucket forgets it when the window ends, and a node never has to sweep.
const bucketIdempotency = "BUB_IDEMPOTENCY"

// idempotencyMarkerTTL is how long the bucket keeps the marker of a key
// its TTL removed; per-key TTLs need one.
const idempotencyMarkerTTL = time.Minute

// idempotencyEntry is the bucket key of identity's key: a hash, as a
// bucket key is a NATS subject token and an idempotency key may hold
// any printable character; it also keeps identities out of the
// bucket's subjects.
func idempotencyEntry(identity, key string) string {
	sum := sha256.Sum256([]byte(identity + "\x00" + key))
	return hex.EncodeToString(sum[:])
}

// GetIdempotent returns the answer recorded for identity's key by any
// node, or nil when there is none or it expired before now.
func (s *Store) GetIdempotent(identity, key string, now time.Time) (*store.Idempotent, error) {
	rec, _, err := s.getIdempotent(identity, key)
	if err != nil || rec == nil || !now.Before(rec.Expires) {
		return nil, err
	}
	return rec, nil
}

// getIdempotent reads identity's key and its revision, expired or not.
func (s *Store) getIdempotent(identity, key string) (*store.Idempotent, uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	e, err := s.n.idempotency.Get(ctx, idempotencyEntry(identity, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, s.n.explain(fmt.Errorf("read idempotency key of %q: %w", identity, err))
	}
	rec := new(store.Idempotent)
	if err := json.Unmarshal(e.Value(), rec); err != nil {
		return nil, 0, fmt.Errorf("%w: idempotency record of %q: %v", store.ErrInvalid, identity, err)
	}
	return rec, e.Revision(), nil
}

// PutIdempotent records the answer to identity's key for every node,
// until rec.Expires, once a majority of the replicas has it. A key
// another node recorded first, within its window, is kept, and the
// error says so: both nodes published (the requests ran at once).
func (s *Store) PutIdempotent(identity, key string, rec *store.Idempotent, now time.Time) error {
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode idempotency record: %w", err)
	}
	// The TTL header counts whole seconds at the least; rounding up
	// keeps the key at least as long as its window.
	ttl := max(time.Second, rec.Expires.Sub(now).Truncate(time.Second)+time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	entry := idempotencyEntry(identity, key)
	_, err = s.n.idempotency.Create(ctx, entry, v, jetstream.KeyTTL(ttl))
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return s.n.explain(fmt.Errorf("record idempotency key of %q: %w", identity, err))
	}
	old, rev, err := s.getIdempotent(identity, key)
	if err != nil {
		return err
	}
	if old != nil && now.Before(old.Expires) {
		return fmt.Errorf("idempotency key of %q recorded by another node first: the request ran on two nodes at once", identity)
	}
	// Expired, and its TTL not yet applied: replaced at the revision
	// read, so that a key another node records meanwhile stays.
	if err := s.n.idempotency.Delete(ctx, entry, jetstream.LastRevision(rev)); err != nil {
		return s.n.explain(fmt.Errorf("replace expired idempotency key of %q: %w", identity, err))
	}
	if _, err := s.n.idempotency.Create(ctx, entry, v, jetstream.KeyTTL(ttl)); err != nil {
		return s.n.explain(fmt.Errorf("record idempotency key of %q: %w", identity, err))
	}
	return nil
}
