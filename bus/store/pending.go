package store

import (
	"fmt"
	"slices"
	"time"
)

// The kinds of Pending.
const (
	// KindRetry is a delivery to one subscriber identity that failed or
	// asked for a retry.
	KindRetry = "retry"
	// KindHold is a message that found no subscriber and is routed again
	// at NextAt.
	KindHold = "hold"
	// KindDurable is a message held for the owner of a durable
	// subscription while it is away (docs/PROTOCOL.md, "Durable
	// subscriptions"): delivered when the owner is back, dead-lettered
	// when NextAt, the end of its hold lifetime, comes first.
	KindDurable = "durable"
)

// Pending is a delivery waiting for its next attempt.
type Pending struct {
	// ID is assigned by PutPending when empty, as "p-" and a zero-padded
	// number, and stays the same afterwards.
	ID string `json:"id"`
	// Kind is KindRetry, KindHold or KindDurable.
	Kind    string  `json:"kind"`
	Message Message `json:"message"`
	// ClientID and Subscription name the subscriber identity a retry
	// targets, its clientId and the pattern it subscribed with; both are
	// required for KindRetry and KindDurable and empty for KindHold.
	ClientID     string `json:"clientId,omitempty"`
	Subscription string `json:"subscription,omitempty"`
	// Subscriber is, for a retry, the identity of the subscriber it
	// waits on (its credential's name, or with no auth its clientId):
	// whom the retry counts against (CountsAgainst). Retries stored
	// before it existed lack it, and count against their publisher.
	Subscriber string `json:"subscriber,omitempty"`
	// Attempts lists every attempt made so far, oldest first.
	Attempts []Attempt `json:"attempts,omitempty"`
	// NextAt is when the next attempt is due.
	NextAt time.Time `json:"nextAt"`
	// AskedBy is, for a hold, the clientId of the fallback subscriber
	// that asked for the message to be routed again later. It is stored
	// so that, after a restart too, that client's own subscriptions do
	// not bring the hold forward: it is the one that asked to wait.
	AskedBy string `json:"askedBy,omitempty"`
}

// checkPending checks the rules for the fields of p other than ID.
func checkPending(p *Pending) error {
	if err := checkMessage(&p.Message); err != nil {
		return err
	}
	return checkKind(p)
}

// checkKind checks the rules for p's fields that depend on its kind.
func checkKind(p *Pending) error {
	switch p.Kind {
	case KindRetry:
		if p.ClientID == "" || p.Subscription == "" {
			return fmt.Errorf("%w: a retry needs a client id and a subscription", ErrInvalid)
		}
		if p.AskedBy != "" {
			return fmt.Errorf("%w: only a hold names the client that asked it to wait", ErrInvalid)
		}
	case KindHold:
		if p.ClientID != "" || p.Subscription != "" || p.Subscriber != "" {
			return fmt.Errorf("%w: a hold has no client id, subscription or subscriber", ErrInvalid)
		}
	case KindDurable:
		if p.ClientID == "" || p.Subscription == "" || p.Subscriber == "" {
			return fmt.Errorf("%w: a message held for a durable subscriber needs its client id, subscription and identity", ErrInvalid)
		}
		if p.AskedBy != "" {
			return fmt.Errorf("%w: only a hold names the client that asked it to wait", ErrInvalid)
		}
	default:
		return fmt.Errorf("%w: kind %q, want %q, %q or %q", ErrInvalid, p.Kind, KindRetry, KindHold, KindDurable)
	}
	return nil
}

// PutPending inserts p, or replaces the entry with p's ID. If p.ID is
// empty it assigns a new one and sets p.ID. An ID must be one this store
// assigned; it may belong to an entry since deleted. The write is
// committed, fsync included, before PutPending returns; writes made at the
// same time share the commit.
func (s *Store) PutPending(p *Pending) error {
	var seq uint64
	var size int
	body, err := preparePending(p)
	if err == nil {
		err = s.updatePending(func(t tx) (err error) {
			seq, size, err = putPending(t, p, body)
			return err
		}, func(ix *pendingIndex) { ix.set(seq, p.CountsAgainst(), size) })
	}
	if err != nil {
		return fmt.Errorf("put pending %s: %w", pendingName(p), err)
	}
	p.ID = FormatID(pendingPrefix, seq)
	return nil
}

// preparePending checks p and encodes all of its record but the id
// (encodePendingBody), before its write is queued: the encoding, most of
// a write's CPU, then runs on the writer's goroutine while the commit
// under way waits on the disk, not on the one goroutine that commits.
func preparePending(p *Pending) ([]byte, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil pending", ErrInvalid)
	}
	if err := checkKind(p); err != nil {
		return nil, err
	}
	return encodePendingBody(p)
}

// putPending writes p, whose record body preparePending encoded, in t and
// returns its sequence number and the size of its record. It leaves p as
// it is: the caller sets p.ID once the write has committed, so that
// running it again on the same state (commitBatch) does the same.
func putPending(t tx, p *Pending, body []byte) (seq uint64, size int, err error) {
	if p.ID == "" {
		if seq, err = t.nextSequence(bucketPending); err != nil {
			return 0, 0, err
		}
	} else {
		if seq, err = ParseID(pendingPrefix, p.ID); err != nil {
			return 0, 0, err
		}
		if seq > t.sequence(bucketPending) {
			return 0, 0, fmt.Errorf("%w: id %s was not assigned by this store", ErrInvalid, p.ID)
		}
	}
	v := sealPending(FormatID(pendingPrefix, seq), body)
	return seq, len(v), t.put(bucketPending, key(seq), v)
}

// pendingName names p in an error.
func pendingName(p *Pending) string {
	if p == nil || p.ID == "" {
		return "(new)"
	}
	return p.ID
}

// DeletePending removes the pending entry id. Removing an id that is not
// there is not an error.
func (s *Store) DeletePending(id string) error {
	seq, err := ParseID(pendingPrefix, id)
	if err == nil {
		err = s.updatePending(func(t tx) error { return t.delete(bucketPending, key(seq)) }, func(ix *pendingIndex) { ix.remove(seq) })
	}
	if err != nil {
		return fmt.Errorf("delete pending %s: %w", id, err)
	}
	return nil
}

// Pending returns every pending entry, ordered by NextAt and then by ID:
// the work to resume after a restart.
func (s *Store) Pending() ([]*Pending, error) {
	var all []*Pending
	err := s.view(func(t tx) error {
		return t.each(bucketPending, nil, func(k, v []byte) (bool, error) {
			p, err := decodePending(k, v)
			if err != nil {
				return false, err
			}
			all = append(all, p)
			return true, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list pending: %w", err)
	}
	// The bucket is in ID order, so a stable sort keeps ties in ID order.
	slices.SortStableFunc(all, func(a, b *Pending) int { return a.NextAt.Compare(b.NextAt) })
	return all, nil
}

// PendingSchedule returns every pending entry as Pending does, but
// without the message's Payload and Meta, which are not even copied out
// of the file: what a scheduler keeps in memory, however large the held
// messages are. LoadMessage reads the rest when an entry is due.
func (s *Store) PendingSchedule() ([]*Pending, error) {
	var all []*Pending
	err := s.view(func(t tx) error {
		return t.each(bucketPending, nil, func(k, v []byte) (bool, error) {
			var r scheduleRecord
			if err := decode(bucketPending, pendingPrefix, k, v, &r); err != nil {
				return false, err
			}
			p := r.Pending
			p.Message = r.Message.Message
			all = append(all, &p)
			return true, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list pending schedule: %w", err)
	}
	slices.SortStableFunc(all, func(a, b *Pending) int { return a.NextAt.Compare(b.NextAt) })
	return all, nil
}

// LoadMessage sets p.Message's Payload and Meta to those stored for the
// entry p.ID: the part PendingSchedule leaves out. It returns an error
// wrapping ErrNotFound when the entry is no longer there.
func (s *Store) LoadMessage(p *Pending) error {
	seq, err := ParseID(pendingPrefix, p.ID)
	if err == nil {
		err = s.view(func(t tx) error {
			k := key(seq)
			v := t.get(bucketPending, k)
			if v == nil {
				return ErrNotFound
			}
			stored, err := decodePending(k, v)
			if err != nil {
				return err
			}
			return p.RestoreMessage(stored)
		})
	}
	if err != nil {
		return fmt.Errorf("load message of pending %s: %w", p.ID, err)
	}
	return nil
}

// RestoreMessage sets p.Message's Payload and Meta, which a schedule
// leaves out, to those of stored: the same entry as a store holds it in
// full. It fails when stored is the entry of another message, so that a
// payload never goes out under another message's id.
func (p *Pending) RestoreMessage(stored *Pending) error {
	if stored.Message.ID != p.Message.ID {
		return fmt.Errorf("the stored entry is for message %q, not %q", stored.Message.ID, p.Message.ID)
	}
	p.Message.Payload, p.Message.Meta = stored.Message.Payload, stored.Message.Meta
	return nil
}

// CountPending returns the number of pending entries.
func (s *Store) CountPending() (int, error) {
	n, err := s.count(bucketPending)
	if err != nil {
		return 0, fmt.Errorf("count pending: %w", err)
	}
	return n, nil
}

func (s *Store) count(b bucket) (n int, err error) {
	err = s.view(func(t tx) error {
		n = t.count(b)
		return nil
	})
	return n, err
}
