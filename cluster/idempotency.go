package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
)

// Idempotency keys are shared by every node in the bucket
// BUB_IDEMPOTENCY, so that a publish retried on any node within the
// window gets the first answer (docs/PROTOCOL.md, "Idempotency-Key").
// A request reserves its key before it publishes, so that the same
// request sent to two nodes at once publishes once: the other node
// answers that the key is busy. Each entry carries a TTL of its own: a
// reservation's is idempotencyReservation, an answer's the time left of
// its window. The bucket forgets a key when it ends, and no node sweeps.
const bucketIdempotency = "BUB_IDEMPOTENCY"

// idempotencyMarkerTTL is how long the bucket keeps the marker of a key
// its TTL removed; per-key TTLs need one.
const idempotencyMarkerTTL = time.Minute

// idempotencyReservation bounds how long a reservation holds a key: a
// node that dies while it publishes leaves the key busy this long at
// most. Longer than a publish that waits for its acks normally takes.
const idempotencyReservation = 2 * time.Minute

// idempotencyRecord is a key's entry: the first answer, or, while the
// request that reserved the key runs, a reservation. Identity is whose
// key it is, for the nodes' counts (idempotency_count.go): the bucket
// key, a hash, does not say; a record written before it was kept counts
// against no identity until its window ends.
type idempotencyRecord struct {
	store.Idempotent
	Identity string `json:"identity,omitempty"`
	Reserved bool   `json:"reserved,omitempty"`
}

// reservations are the revisions of this node's reservations, by entry,
// which PutIdempotent replaces and ReleaseIdempotent deletes.
type reservations struct {
	mu   sync.Mutex
	revs map[string]uint64
}

func (r *reservations) put(entry string, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revs == nil {
		r.revs = make(map[string]uint64)
	}
	r.revs[entry] = rev
}

func (r *reservations) take(entry string) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rev, ok := r.revs[entry]
	delete(r.revs, entry)
	return rev, ok
}

var _ bus.IdempotencyReserver = (*Store)(nil)

// idempotencyEntry is the bucket key of identity's key: a hash, as a
// bucket key is a NATS subject token and an idempotency key may hold
// any printable character; it also keeps identities out of the
// bucket's subjects.
func idempotencyEntry(identity, key string) string {
	sum := sha256.Sum256([]byte(identity + "\x00" + key))
	return hex.EncodeToString(sum[:])
}

// GetIdempotent returns the answer recorded for identity's key by any
// node, or nil when there is none, it expired before now, or a request
// holds it reserved.
func (s *Store) GetIdempotent(identity, key string, now time.Time) (*store.Idempotent, error) {
	rec, _, err := s.getIdempotent(identity, key)
	if err != nil || rec == nil || rec.Reserved || !now.Before(rec.Expires) {
		return nil, err
	}
	return &rec.Idempotent, nil
}

// ReserveIdempotent returns the answer recorded for identity's key
// within its window; when there is none, it reserves the key for this
// node's request, until PutIdempotent or ReleaseIdempotent. A key
// another request reserved is bus.ErrIdempotencyBusy.
func (s *Store) ReserveIdempotent(identity, key string, now time.Time) (*store.Idempotent, error) {
	entry := idempotencyEntry(identity, key)
	reservation := &idempotencyRecord{Reserved: true, Identity: identity, Idempotent: store.Idempotent{Expires: now.Add(idempotencyReservation)}}
	v, err := json.Marshal(reservation)
	if err != nil {
		return nil, fmt.Errorf("encode idempotency reservation: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	// Twice at most: a key found expired is removed, then created.
	for range 2 {
		rev, err := s.createIdempotent(ctx, entry, v, idempotencyReservation)
		if err == nil {
			s.reserved.put(entry, rev)
			s.keys.apply(entry, rev, reservation, int64(len(v)), false)
			return nil, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, s.n.explain(fmt.Errorf("reserve idempotency key of %q: %w", identity, err))
		}
		rec, rev, err := s.getIdempotent(identity, key)
		switch {
		case err != nil:
			return nil, err
		case rec != nil && now.Before(rec.Expires) && rec.Reserved:
			return nil, bus.ErrIdempotencyBusy
		case rec != nil && now.Before(rec.Expires):
			return &rec.Idempotent, nil
		case rec != nil:
			// Expired, its TTL not yet applied: removed at the revision
			// read, so that a key another node records meanwhile stays.
			del, err := s.n.deleteKey(ctx, bucketIdempotency, entry, rev)
			if err == nil {
				s.keys.apply(entry, del, nil, 0, false)
			} else if !isWrongRevision(err) {
				return nil, s.n.explain(fmt.Errorf("remove expired idempotency key of %q: %w", identity, err))
			}
		}
	}
	return nil, fmt.Errorf("idempotency key of %q changed while it was reserved; try again", identity)
}

// createIdempotent writes v under entry, with a TTL of ttl, only where
// the key holds nothing: never written, or ended by a delete or its TTL,
// whose marker it writes over; else it fails with
// jetstream.ErrKeyExists. It does what the client library's Create
// does, but through publishKV, so that it waits out an election as the
// node's other writes do: the first reservation of a key failed at once
// while the bucket's stream had no leader, and its publish with it.
func (s *Store) createIdempotent(ctx context.Context, entry string, v []byte, ttl time.Duration) (uint64, error) {
	subject := kvSubject(bucketIdempotency, entry)
	create := func(over uint64) (uint64, error) {
		rev, err := s.n.publishKV(ctx, &nats.Msg{Subject: subject, Data: v}, over, jetstream.WithMsgTTL(ttl))
		if isWrongRevision(err) {
			return 0, jetstream.ErrKeyExists
		}
		return rev, err
	}
	rev, err := create(0)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return rev, err
	}
	// Written before: over its marker, if the last write is one.
	_, marker, err := s.leaderGetSeq(ctx, bucketIdempotency, subject)
	switch {
	case err == nil:
		return 0, jetstream.ErrKeyExists
	case !errors.Is(err, store.ErrNotFound):
		return 0, err
	}
	return create(marker)
}

// getIdempotent reads identity's key and its revision, expired or not,
// as the bucket's leader has it (leaderGetSeq): kv.Get may be answered by
// a replica that has not applied the answer another node just recorded,
// and would show its reservation instead, a 409 for a repeat that should
// get the first answer.
func (s *Store) getIdempotent(identity, key string) (*idempotencyRecord, uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	data, rev, err := s.leaderGetSeq(ctx, bucketIdempotency, kvSubject(bucketIdempotency, idempotencyEntry(identity, key)))
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, s.n.explain(fmt.Errorf("read idempotency key of %q: %w", identity, err))
	}
	rec := new(idempotencyRecord)
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, 0, fmt.Errorf("%w: idempotency record of %q: %v", store.ErrInvalid, identity, err)
	}
	return rec, rev, nil
}

// PutIdempotent records the answer to identity's key for every node,
// until rec.Expires, once a majority of the replicas has it: in place of
// this node's reservation, at its revision, or as a new key.
func (s *Store) PutIdempotent(identity, key string, rec *store.Idempotent, now time.Time) error {
	record := &idempotencyRecord{Idempotent: *rec, Identity: identity}
	v, err := json.Marshal(record)
	if err != nil {
		return fmt.Errorf("encode idempotency record: %w", err)
	}
	// The TTL header counts whole seconds at the least; rounding up
	// keeps the key at least as long as its window.
	ttl := max(time.Second, rec.Expires.Sub(now).Truncate(time.Second)+time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	entry := idempotencyEntry(identity, key)
	var rev uint64
	if over, ok := s.reserved.take(entry); ok {
		// The client library's Update takes no TTL: the put is made as
		// it makes it, with one.
		rev, err = s.n.publishKV(ctx, &nats.Msg{Subject: kvSubject(bucketIdempotency, entry), Data: v}, over, jetstream.WithMsgTTL(ttl))
	} else {
		rev, err = s.createIdempotent(ctx, entry, v, ttl)
	}
	if err != nil {
		return s.n.explain(fmt.Errorf("record idempotency key of %q: %w", identity, err))
	}
	s.keys.apply(entry, rev, record, int64(len(v)), false)
	return nil
}

// ReleaseIdempotent removes this node's reservation of identity's key,
// so that a retry of the request that failed runs again; a failure is
// logged, and the reservation ends with its TTL.
func (s *Store) ReleaseIdempotent(identity, key string) {
	entry := idempotencyEntry(identity, key)
	rev, ok := s.reserved.take(entry)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	del, err := s.n.deleteKey(ctx, bucketIdempotency, entry, rev)
	if err == nil {
		s.keys.apply(entry, del, nil, 0, false)
	} else if !isWrongRevision(err) {
		s.n.log.Warn("cluster: idempotency key stays reserved until its reservation ends", "ttl", idempotencyReservation, "err", s.n.explain(err))
	}
}
