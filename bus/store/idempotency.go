package store

import (
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
// near the keys used within the window.
func (s *Store) PutIdempotent(identity, key string, rec *Idempotent, now time.Time) error {
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode idempotency record: %w", err)
	}
	return s.update(func(t tx) error {
		// The records after this one are looked at, a few per write:
		// the keys in use spread the looks over the whole bucket.
		var expired [][]byte
		looked := 0
		err := t.each(bucketIdempotency, idempotencyKey(identity, key), func(k, v []byte) (bool, error) {
			var old Idempotent
			if json.Unmarshal(v, &old) == nil && !now.Before(old.Expires) {
				expired = append(expired, append([]byte(nil), k...))
			}
			looked++
			return looked < pruneIdempotent, nil
		})
		if err != nil {
			return err
		}
		for _, k := range expired {
			if err := t.delete(bucketIdempotency, k); err != nil {
				return err
			}
		}
		return t.put(bucketIdempotency, idempotencyKey(identity, key), seal(v))
	})
}

// pruneIdempotent bounds the records one PutIdempotent looks at to drop
// the expired among them.
const pruneIdempotent = 16
