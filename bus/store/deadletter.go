package store

import (
	"bytes"
	"fmt"
	"time"

	"github.com/bub-bus/bub/protocol"
)

// checkReason accepts the reasons of protocol (protocol.ReasonMaxRetries
// and its siblings), the one list of them.
func checkReason(reason string) error {
	switch reason {
	case protocol.ReasonMaxRetries, protocol.ReasonSubscriberGone, protocol.ReasonNoSubscribers, protocol.ReasonRejected:
		return nil
	}
	return fmt.Errorf("%w: reason %q, want %s, %s, %s or %s", ErrInvalid, reason,
		protocol.ReasonMaxRetries, protocol.ReasonSubscriberGone, protocol.ReasonNoSubscribers, protocol.ReasonRejected)
}

// DefaultListLimit is the page size of ListDeadLetters when limit <= 0.
const DefaultListLimit = 100

// DeadLetter is a message that could not be delivered, with why and every
// attempt made.
type DeadLetter struct {
	// ID is assigned by the store, as "d-" and a zero-padded number. IDs
	// sort in the order the entries were added, which is list order.
	ID      string  `json:"id"`
	Message Message `json:"message"`
	// ClientID and Subscription name the subscriber identity, its clientId
	// and pattern; empty for ReasonNoSubscribers.
	ClientID     string `json:"clientId,omitempty"`
	Subscription string `json:"subscription,omitempty"`
	// Subscriber is the subscriber's identity, as Pending.Subscriber:
	// a replay to the same subscriber counts against it again.
	Subscriber string `json:"subscriber,omitempty"`
	// Reason is one of the Reason constants.
	Reason   string    `json:"reason"`
	Attempts []Attempt `json:"attempts,omitempty"`
	// FirstAttempt and LastAttempt are the times of the first and last
	// attempts, zero if none was made. DeadAt is when the message was
	// dead-lettered.
	FirstAttempt time.Time `json:"firstAttempt,omitzero"`
	LastAttempt  time.Time `json:"lastAttempt,omitzero"`
	DeadAt       time.Time `json:"deadAt"`
}

// Filter selects dead letters. The zero Filter selects all of them; each
// field set narrows the selection.
type Filter struct {
	// Topic is a subscription pattern (protocol.ParsePattern) that the
	// message's topic must match.
	Topic string
	// Reason is one of the Reason constants.
	Reason string
	// Since and Until bound DeadAt: Since <= DeadAt < Until. A zero time
	// leaves that side open.
	Since, Until time.Time
}

// Matcher is a checked Filter; a nil *Matcher matches everything.
type Matcher struct {
	pattern      *protocol.Pattern
	reason       string
	since, until time.Time
}

// Matcher checks f and returns what applies it: nil for the zero
// Filter. It fails with ErrInvalid for a bad pattern or reason.
func (f Filter) Matcher() (*Matcher, error) {
	if f == (Filter{}) {
		return nil, nil
	}
	m := &Matcher{reason: f.Reason, since: f.Since, until: f.Until}
	if f.Topic != "" {
		p, err := protocol.ParsePattern(f.Topic)
		if err != nil {
			return nil, fmt.Errorf("%w: topic: %w", ErrInvalid, err)
		}
		m.pattern = p
	}
	if f.Reason != "" {
		if err := checkReason(f.Reason); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Match reports whether d is selected.
func (m *Matcher) Match(d *DeadLetter) bool {
	switch {
	case m == nil:
		return true
	case m.pattern != nil && !m.pattern.Match(d.Message.Topic),
		m.reason != "" && d.Reason != m.reason,
		!m.since.IsZero() && d.DeadAt.Before(m.since),
		!m.until.IsZero() && !d.DeadAt.Before(m.until):
		return false
	}
	return true
}

// DeadLetter adds d to the dead-letter queue and, in the same commit,
// removes the pending entry pendingID unless it is empty; a pendingID that
// is not there is not an error. The store sets d.ID, which it returns,
// DeadAt to now if zero, and FirstAttempt and LastAttempt from Attempts if
// zero. Any ID d had is replaced. The write is committed, fsync included,
// before DeadLetter returns.
func (s *Store) DeadLetter(pendingID string, d *DeadLetter) (string, error) {
	var pending uint64
	var size int
	err := func() (err error) {
		r, err := PrepareDeadLetter(d)
		if err != nil {
			return err
		}
		if pendingID != "" {
			if pending, err = ParseID(pendingPrefix, pendingID); err != nil {
				return err
			}
		}
		err = s.updatePending(func(t tx) error {
			if pending != 0 {
				if err := t.delete(bucketPending, key(pending)); err != nil {
					return err
				}
			}
			seq, err := t.nextSequence(bucketDeadLetters)
			if err != nil {
				return err
			}
			r.ID = FormatID(deadLetterPrefix, seq)
			v, err := EncodeDeadLetter(&r)
			if err != nil {
				return err
			}
			size = len(v)
			return t.put(bucketDeadLetters, key(seq), v)
		}, func(ix *pendingIndex) {
			ix.remove(pending)
			ix.dead.add(int64(size), 1)
		})
		if err == nil {
			*d = r
		}
		return err
	}()
	if err != nil {
		return "", fmt.Errorf("dead-letter %s: %w", DeadLetterName(pendingID, d), err)
	}
	return d.ID, nil
}

// PrepareDeadLetter checks d and returns the record DeadLetter stores for
// it: a copy with DeadAt set to now if zero, and FirstAttempt and
// LastAttempt from Attempts if zero. It fails with ErrInvalid for a nil
// d, an unknown reason or a payload or meta that is not JSON.
func PrepareDeadLetter(d *DeadLetter) (DeadLetter, error) {
	if d == nil {
		return DeadLetter{}, fmt.Errorf("%w: nil dead letter", ErrInvalid)
	}
	if err := checkReason(d.Reason); err != nil {
		return DeadLetter{}, err
	}
	if err := checkMessage(&d.Message); err != nil {
		return DeadLetter{}, err
	}
	r := *d
	if r.DeadAt.IsZero() {
		r.DeadAt = time.Now().UTC()
	}
	if n := len(r.Attempts); n > 0 {
		if r.FirstAttempt.IsZero() {
			r.FirstAttempt = r.Attempts[0].At
		}
		if r.LastAttempt.IsZero() {
			r.LastAttempt = r.Attempts[n-1].At
		}
	}
	return r, nil
}

// DeadLetterName names what a DeadLetter call moves, for its error: the
// message, and the pending entry when there is one.
func DeadLetterName(pendingID string, d *DeadLetter) string {
	name := "message"
	if d != nil {
		name += " " + d.Message.ID
	}
	if pendingID != "" {
		name += " (pending " + pendingID + ")"
	}
	return name
}

// GetDeadLetter returns the dead letter id, or an error wrapping
// ErrNotFound.
func (s *Store) GetDeadLetter(id string) (*DeadLetter, error) {
	var d *DeadLetter
	seq, err := ParseID(deadLetterPrefix, id)
	if err == nil {
		err = s.view(func(t tx) error {
			k := key(seq)
			v := t.get(bucketDeadLetters, k)
			if v == nil {
				return ErrNotFound
			}
			d, err = decodeDeadLetter(k, v)
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("get dead letter %s: %w", id, err)
	}
	return d, nil
}

// ListDeadLetters returns up to limit dead letters that match f, oldest
// first, starting at cursor: "" for the first page, then the next of the
// previous page. next is "" when there is nothing more. A cursor is opaque
// and stays valid when entries are removed. limit <= 0 means
// DefaultListLimit.
func (s *Store) ListDeadLetters(f Filter, cursor string, limit int) (entries []*DeadLetter, next string, err error) {
	page, from, err := NewPage(f, cursor, limit)
	if err == nil {
		var start []byte
		if from > 0 {
			start = key(from)
		}
		err = s.view(func(t tx) error {
			return t.each(bucketDeadLetters, start, func(k, v []byte) (bool, error) {
				return page.Add(decodeDeadLetter(k, v))
			})
		})
	}
	if err != nil {
		return nil, "", fmt.Errorf("list dead letters: %w", err)
	}
	return page.Entries, page.Next, nil
}

// Page is one page of a dead-letter listing as a store reads it: the
// store hands it every entry from the cursor on, oldest first, and it
// keeps those that match until the page is full.
type Page struct {
	m     *Matcher
	limit int
	// Entries are the page's dead letters; Next is the cursor of the
	// page after, "" when there is none.
	Entries []*DeadLetter
	Next    string
}

// NewPage checks a listing's filter and cursor, and returns its page and
// the sequence number it starts at (0: the first entry). limit <= 0
// means DefaultListLimit.
func NewPage(f Filter, cursor string, limit int) (*Page, uint64, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	m, err := f.Matcher()
	if err != nil {
		return nil, 0, err
	}
	var from uint64
	if cursor != "" {
		if from, err = ParseID(deadLetterPrefix, cursor); err != nil {
			return nil, 0, fmt.Errorf("%w: cursor %q", ErrInvalid, cursor)
		}
	}
	return &Page{m: m, limit: limit}, from, nil
}

// Add takes the next entry, or the error reading it, and reports whether
// the store should go on.
func (p *Page) Add(d *DeadLetter, err error) (bool, error) {
	if err != nil || !p.m.Match(d) {
		return err == nil, err
	}
	if len(p.Entries) == p.limit {
		p.Next = d.ID
		return false, nil
	}
	p.Entries = append(p.Entries, d)
	return true, nil
}

// RemoveDeadLetter removes the dead letter id, or returns an error
// wrapping ErrNotFound. It does not read the entry, so it also removes
// one that is corrupt.
func (s *Store) RemoveDeadLetter(id string) error {
	seq, err := ParseID(deadLetterPrefix, id)
	if err == nil {
		var size int
		err = s.updatePending(func(t tx) (err error) {
			size, err = removeDeadLetter(t, seq)
			return err
		}, func(ix *pendingIndex) { ix.dead.add(int64(size), -1) })
	}
	if err != nil {
		return fmt.Errorf("remove dead letter %s: %w", id, err)
	}
	return nil
}

// removeDeadLetter deletes the dead letter seq in t and returns the size
// of its record.
func removeDeadLetter(t tx, seq uint64) (int, error) {
	k := key(seq)
	v := t.get(bucketDeadLetters, k)
	if v == nil {
		return 0, ErrNotFound
	}
	return len(v), t.delete(bucketDeadLetters, k)
}

// Requeue removes the dead letter id and puts p as PutPending does, in one
// commit: a replay to the same subscriber. If id is not there it returns
// an error wrapping ErrNotFound and stores nothing.
func (s *Store) Requeue(id string, p *Pending) error {
	seq, err := ParseID(deadLetterPrefix, id)
	var pending uint64
	var removed, size int
	var body []byte
	if err == nil {
		body, err = preparePending(p)
	}
	if err == nil {
		err = s.updatePending(func(t tx) (err error) {
			if removed, err = removeDeadLetter(t, seq); err != nil {
				return err
			}
			pending, size, err = putPending(t, p, body)
			return err
		}, func(ix *pendingIndex) {
			ix.dead.add(int64(removed), -1)
			ix.set(pending, p.CountsAgainst(), size)
		})
	}
	if err != nil {
		return fmt.Errorf("requeue dead letter %s: %w", id, err)
	}
	p.ID = FormatID(pendingPrefix, pending)
	return nil
}

// PurgeDeadLetters removes every dead letter that matches f, in one
// commit, and returns how many. The zero Filter removes all of them
// without reading them, corrupt ones included.
func (s *Store) PurgeDeadLetters(f Filter) (int, error) {
	var n int
	err := func() error {
		m, err := f.Matcher()
		if err != nil {
			return err
		}
		var freed int64
		return s.updatePending(func(t tx) error {
			var doomed [][]byte
			freed = 0
			err := t.each(bucketDeadLetters, nil, func(k, v []byte) (bool, error) {
				if m != nil {
					d, err := decodeDeadLetter(k, v)
					if err != nil || !m.Match(d) {
						return err == nil, err
					}
				}
				doomed = append(doomed, bytes.Clone(k))
				freed += int64(len(v))
				return true, nil
			})
			if err != nil {
				return err
			}
			for _, k := range doomed {
				if err := t.delete(bucketDeadLetters, k); err != nil {
					return err
				}
			}
			n = len(doomed)
			return nil
		}, func(ix *pendingIndex) {
			ix.dead.Entries -= n
			ix.dead.Bytes -= freed
		})
	}()
	if err != nil {
		return 0, fmt.Errorf("purge dead letters: %w", err)
	}
	return n, nil
}

// CountDeadLetters returns the number of dead letters.
func (s *Store) CountDeadLetters() (int, error) {
	n, err := s.count(bucketDeadLetters)
	if err != nil {
		return 0, fmt.Errorf("count dead letters: %w", err)
	}
	return n, nil
}
