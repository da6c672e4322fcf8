package store

import (
	"fmt"
	"time"
)

// PutRaw stores v as the record with the id ("p-…" or "d-…") without
// encoding it, as a corrupt or foreign file would hold it.
func PutRaw(s *Store, id string, v []byte) error {
	b, prefix := bucketPending, pendingPrefix
	if id[:2] == deadLetterPrefix {
		b, prefix = bucketDeadLetters, deadLetterPrefix
	}
	seq, err := ParseID(prefix, id)
	if err != nil {
		return err
	}
	return s.update(func(t tx) error {
		for t.sequence(b) < seq {
			if _, err := t.nextSequence(b); err != nil {
				return err
			}
		}
		return t.put(b, key(seq), v)
	})
}

// Encode returns the stored form of a *Pending or a *DeadLetter.
func Encode(record any) ([]byte, error) {
	switch r := record.(type) {
	case *Pending:
		return encodePending(r)
	case *DeadLetter:
		return EncodeDeadLetter(r)
	}
	return nil, fmt.Errorf("encode %T", record)
}

// SetOnCommit sets the store's commit hook, as Options.OnCommit does for
// a file store; call it before the first write.
func SetOnCommit(s *Store, fn func(time.Duration)) { s.onCommit = fn }

// Queued returns the number of writes waiting for the committer.
func Queued(s *Store) int {
	s.commits.mu.Lock()
	defer s.commits.mu.Unlock()
	return len(s.commits.queue)
}

// Write commits a write that runs fn in its transaction and changes
// nothing else.
func Write(s *Store, fn func() error) error {
	return s.update(func(tx) error { return fn() })
}

// EncodeWithJSON returns what encoding/json, with HTML escaping off,
// makes of p's record: the form Encode must write byte for byte.
func EncodeWithJSON(p *Pending) ([]byte, error) {
	b, err := encode(pendingRecord{Version: recordVersion, Pending: *p})
	if err != nil {
		return nil, err
	}
	return seal(b), nil
}

// Sealed reports whether v carries a checksum that matches.
func Sealed(v []byte) bool {
	sealed, err := unseal(v)
	return sealed && err == nil
}

// StoredBytes sums the records of the pending bucket and of the
// dead-letter bucket as the file holds them, for checking the counts.
func StoredBytes(s *Store) (pending, dead Usage, err error) {
	err = s.view(func(t tx) error {
		for b, u := range map[bucket]*Usage{bucketPending: &pending, bucketDeadLetters: &dead} {
			if err := t.each(b, nil, func(_, v []byte) (bool, error) {
				u.add(int64(len(v)), 1)
				return true, nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	return pending, dead, err
}
