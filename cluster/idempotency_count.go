package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/bus/store"
)

// The bus asks an identity's idempotency usage for every new key (the
// per-identity key cap) and for every publish (the stored-bytes quota,
// through PendingUsage), so it cannot list the bucket each time: its
// entries are hashes, and a listing is a scan of every identity's keys.
// Each node keeps the count in memory instead, as it does the pending
// entries' (pendingCounts): a watch of BUB_IDEMPOTENCY, loaded from the
// bucket when the node starts, applies every node's writes and every
// key its TTL ended, and the node's own writes are applied as soon as
// JetStream acknowledges them.
//
// The bound this gives: a node counts its own keys at once and another
// node's as soon as its watch delivers them, normally milliseconds
// later. So an identity holds at most its cap plus the new keys other
// nodes admitted within that moment; while a node's watch is stalled
// (up to about 20 s around a node's death, see watch.go) the others'
// keys reach it late, and an identity spreading new keys over N nodes
// holds at most N times its cap, each node refusing once its own count
// is full. The bytes quota drifts the same way, as it does for pending
// entries.

// keyCounts counts the bucket's idempotency records by identity.
type keyCounts struct {
	mu      sync.Mutex
	entries map[string]keyCount
	total   store.Usage
	by      map[string]*identityKeys
}

// keyCount is the last change known of a bucket entry, at its revision.
// A delete is kept (live false) only while the watch has not yet seen
// it, so that an older put the watch delivers late is ignored. A
// reservation is live but not counted: the single-node store counts a
// key once it holds an answer, and the request that reserved a key is
// the one that asks whether its identity has room for it.
type keyCount struct {
	rev      uint64
	identity string
	size     int64
	expires  time.Time
	live     bool
	counted  bool
}

// identityKeys are an identity's counted records: their usage, and the
// entries, for PruneIdempotent.
type identityKeys struct {
	usage   store.Usage
	entries map[string]struct{}
}

// apply records the change of entry at rev, unless a later one is known:
// rec is what was written, of size bytes, or nil for a delete (by a node
// or by the entry's TTL). watched says the watch delivered it.
func (c *keyCounts) apply(entry string, rev uint64, rec *idempotencyRecord, size int64, watched bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.entries[entry]
	if ok && old.rev >= rev {
		if watched && old.rev == rev && !old.live {
			delete(c.entries, entry) // the watch caught up with the delete
		}
		return
	}
	if ok && old.counted {
		c.uncount(entry, old)
	}
	switch {
	case rec != nil:
		e := keyCount{rev: rev, identity: rec.Identity, size: size, expires: rec.Expires, live: true, counted: !rec.Reserved}
		c.entries[entry] = e
		if e.counted {
			c.count(entry, e)
		}
	case watched:
		delete(c.entries, entry)
	default:
		c.entries[entry] = keyCount{rev: rev}
	}
}

// count adds e, entry's record, to its identity's usage. c.mu is held.
func (c *keyCounts) count(entry string, e keyCount) {
	c.total = usagePlus(c.total, 1, e.size)
	k := c.by[e.identity]
	if k == nil {
		k = &identityKeys{entries: make(map[string]struct{})}
		c.by[e.identity] = k
	}
	k.usage = usagePlus(k.usage, 1, e.size)
	k.entries[entry] = struct{}{}
}

// uncount takes e, entry's record, off its identity's usage. c.mu is
// held.
func (c *keyCounts) uncount(entry string, e keyCount) {
	c.total = usagePlus(c.total, -1, e.size)
	k := c.by[e.identity]
	if k == nil {
		return
	}
	k.usage = usagePlus(k.usage, -1, e.size)
	delete(k.entries, entry)
	if len(k.entries) == 0 {
		delete(c.by, e.identity)
	}
}

// usage returns what all the records take, and identity's.
func (c *keyCounts) usage(identity string) (total, mine store.Usage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.by[identity]; k != nil {
		mine = k.usage
	}
	return c.total, mine
}

// expired returns identity's records that expired before now, with
// their revisions, and when the first of the others expires.
func (c *keyCounts) expired(identity string, now time.Time) (gone map[string]uint64, next time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.by[identity]
	if k == nil {
		return nil, time.Time{}
	}
	gone = make(map[string]uint64)
	for entry := range k.entries {
		e := c.entries[entry]
		switch {
		case !now.Before(e.expires):
			gone[entry] = e.rev
		case next.IsZero() || e.expires.Before(next):
			next = e.expires
		}
	}
	return gone, next
}

// watchKeys loads the counts of the idempotency records and keeps them
// for the node's life; it returns once they hold every record there was.
func (s *Store) watchKeys(ctx context.Context) error {
	s.keys.entries = make(map[string]keyCount)
	s.keys.by = make(map[string]*identityKeys)
	return s.n.startWatch(ctx, s.n.idempotency, bucketIdempotency, false, func(e jetstream.KeyValueEntry, _ bool) {
		if e.Operation() != jetstream.KeyValuePut {
			s.keys.apply(e.Key(), e.Revision(), nil, 0, true)
			return
		}
		rec := new(idempotencyRecord)
		if err := json.Unmarshal(e.Value(), rec); err != nil {
			// Counted all the same, against no one: it takes space
			// until its TTL ends it.
			s.n.log.Warn("cluster: an idempotency record does not decode; counted against no identity", "bucket", bucketIdempotency, "err", err)
			rec = &idempotencyRecord{Idempotent: store.Idempotent{Expires: time.Now().Add(idempotencyReservation)}}
		}
		s.keys.apply(e.Key(), e.Revision(), rec, int64(len(e.Value())), true)
	})
}

// IdempotentUsage returns what identity's idempotency records take,
// every node's: how many, and their bytes as stored. It reads the counts
// this node keeps (see above): no round trip. Records that expired
// count until their TTL ends them or PruneIdempotent drops them; a
// reservation does not count.
func (s *Store) IdempotentUsage(identity string) (store.Usage, error) {
	_, mine := s.keys.usage(identity)
	return mine, nil
}

// PruneIdempotent drops identity's idempotency records that expired
// before now, whichever node made them, and returns when the first of
// those left expires (zero when none is left). A record another node
// rewrote meanwhile stays: each is deleted at the revision counted.
func (s *Store) PruneIdempotent(identity string, now time.Time) (time.Time, error) {
	gone, next := s.keys.expired(identity, now)
	if len(gone) == 0 {
		return next, nil
	}
	err := s.write(func(ctx context.Context) error {
		var errs []error
		for entry, rev := range gone {
			del, err := s.n.deleteKey(ctx, bucketIdempotency, entry, rev)
			switch {
			case err == nil:
				s.keys.apply(entry, del, nil, 0, false)
			case !isWrongRevision(err):
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return next, s.n.explain(fmt.Errorf("drop expired idempotency keys of %q: %w", identity, err))
	}
	return next, nil
}
