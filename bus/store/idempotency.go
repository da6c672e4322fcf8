package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// bucketIdempotency maps identity NUL key to the first answer to a
// publish made with that idempotency key.
const bucketIdempotency bucket = "idempotency"

// Idempotent is the first answer to a publish made with an idempotency
// key: what a repeat of the same request gets instead of publishing
// again.
type Idempotent struct {
	// BodyHash is the SHA-256 of the request that first used the key; a
	// request with the key and another body is refused.
	BodyHash []byte `json:"bodyHash"`
	// Answer is the first answer's body.
	Answer json.RawMessage `json:"answer"`
	// Expires is when the key may be used for another request.
	Expires time.Time `json:"expires"`
}

// idempotencyKey is the record key of key for identity: an identity's
// keys never meet another's.
func idempotencyKey(identity, key string) []byte {
	return []byte(identity + "\x00" + key)
}

// GetIdempotent returns the answer recorded for identity's key, or nil
// when there is none or it expired before now.
func (s *Store) GetIdempotent(identity, key string, now time.Time) (*Idempotent, error) {
	var rec *Idempotent
	err := s.view(func(t tx) error {
		v := t.get(bucketIdempotency, idempotencyKey(identity, key))
		if v == nil {
			return nil
		}
		// A damaged record must not answer for another request: its
		// checksum is checked as every record's is.
		if sealed, err := unseal(v); err != nil || !sealed {
			return fmt.Errorf("%w: idempotency record of %q: checksum missing or wrong", ErrInvalid, identity)
		}
		rec = new(Idempotent)
		if err := json.Unmarshal(v, rec); err != nil {
			return fmt.Errorf("%w: idempotency record of %q: %v", ErrInvalid, identity, err)
		}
		return nil
	})
	if err != nil || rec == nil || !now.Before(rec.Expires) {
		return nil, err
	}
	return rec, nil
}

// PutIdempotent records the answer to identity's key, durably, and drops
// some of the records that expired before now, so the bucket stays
// near the keys used within the window. The records count against
// identity (IdempotentUsage, and PendingUsage's bytes) until they are
// dropped.
func (s *Store) PutIdempotent(identity, key string, rec *Idempotent, now time.Time) error {
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode idempotency record: %w", err)
	}
	v = seal(v)
	k := idempotencyKey(identity, key)
	var gone []keyRecord
	var replaced int64
	err = s.updatePending(func(t tx) error {
		// The records after this one are looked at, a few per write:
		// the keys in use spread the looks over the whole bucket.
		gone, replaced = gone[:0], 0
		if old := t.get(bucketIdempotency, k); old != nil {
			replaced = int64(len(old))
		}
		looked := 0
		err := t.each(bucketIdempotency, k, func(k, v []byte) (bool, error) {
			var old Idempotent
			if json.Unmarshal(v, &old) == nil && !now.Before(old.Expires) {
				gone = append(gone, keyRecord{key: append([]byte(nil), k...), size: int64(len(v))})
			}
			looked++
			return looked < pruneIdempotent, nil
		})
		if err != nil {
			return err
		}
		if err := deleteRecords(t, gone); err != nil {
			return err
		}
		return t.put(bucketIdempotency, k, v)
	}, func(ix *pendingIndex) {
		for _, r := range gone {
			if bytes.Equal(r.key, k) {
				// Expired and replaced: counted as replaced below.
				continue
			}
			ix.countKey(keyOwner(r.key), r.size, -1)
		}
		if replaced > 0 {
			ix.countKey(identity, replaced, -1)
		}
		ix.countKey(identity, int64(len(v)), 1)
	})
	return err
}

// pruneIdempotent bounds the records one PutIdempotent looks at to drop
// the expired among them.
const pruneIdempotent = 16

// keyRecord is an idempotency record to drop, with its size.
type keyRecord struct {
	key  []byte
	size int64
}

// deleteRecords drops records from the idempotency bucket.
func deleteRecords(t tx, records []keyRecord) error {
	for _, r := range records {
		if err := t.delete(bucketIdempotency, r.key); err != nil {
			return err
		}
	}
	return nil
}

// keyOwner is the identity of an idempotency record's key: what is
// before its last NUL (a key is printable ASCII; an identity may hold a
// NUL, as a webhook's does).
func keyOwner(k []byte) string {
	if i := bytes.LastIndexByte(k, 0); i >= 0 {
		return string(k[:i])
	}
	return ""
}

// IdempotentUsage returns what identity's idempotency records take: how
// many, and their bytes as stored. Records that expired count until they
// are dropped (PruneIdempotent).
func (s *Store) IdempotentUsage(identity string) (Usage, error) {
	ix, err := s.counts()
	if err != nil {
		return Usage{}, err
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.keys[identity], nil
}

// PruneIdempotent drops identity's idempotency records that expired
// before now, and returns when the first of those left expires (zero
// when none is left). An identity's records are next to one another in
// the bucket, so this reads only them.
func (s *Store) PruneIdempotent(identity string, now time.Time) (next time.Time, err error) {
	// Read first: an identity at its quota asks on every publish it is
	// refused, and a commit (a write and an fsync) for nothing expired
	// would turn each refusal into a disk write.
	var gone []keyRecord
	if err := s.view(func(t tx) error {
		gone, next, err = expiredKeys(t, identity, now)
		return err
	}); err != nil || len(gone) == 0 {
		return next, err
	}
	err = s.updatePending(func(t tx) error {
		gone, next, err = expiredKeys(t, identity, now)
		if err != nil {
			return err
		}
		return deleteRecords(t, gone)
	}, func(ix *pendingIndex) {
		for _, r := range gone {
			ix.countKey(identity, r.size, -1)
		}
	})
	return next, err
}

// expiredKeys returns identity's idempotency records that expired by now,
// and when the first of the others expires (zero when none is left).
func expiredKeys(t tx, identity string, now time.Time) (gone []keyRecord, next time.Time, err error) {
	prefix := []byte(identity + "\x00")
	err = t.each(bucketIdempotency, prefix, func(k, v []byte) (bool, error) {
		if !bytes.HasPrefix(k, prefix) {
			return false, nil
		}
		if bytes.IndexByte(k[len(prefix):], 0) >= 0 {
			// Another identity's, whose name starts with this one and a
			// NUL.
			return true, nil
		}
		var rec Idempotent
		if json.Unmarshal(v, &rec) == nil && now.Before(rec.Expires) {
			if next.IsZero() || rec.Expires.Before(next) {
				next = rec.Expires
			}
			return true, nil
		}
		gone = append(gone, keyRecord{key: append([]byte(nil), k...), size: int64(len(v))})
		return true, nil
	})
	return gone, next, err
}
