package store

import (
	"encoding/json"
	"sync"
	"sync/atomic"
)

// Usage is what some stored entries take: how many there are, and their
// bytes as stored (the encoded records, payload included).
type Usage struct {
	Entries int
	Bytes   int64
}

// add counts an entry of size bytes in, or out when sign is -1.
func (u *Usage) add(size int64, sign int) {
	u.Entries += sign
	u.Bytes += int64(sign) * size
}

// pendingIndex counts the pending entries, in all and by whom they count
// against, and the dead letters in all, so that the bus can enforce its
// caps on every publish and dead letter without reading the store. It is
// built from the store on first use and kept in step by every write that
// adds or removes an entry.
type pendingIndex struct {
	// writeMu is held by the committer from a transaction to the update
	// of the counts, and by the build, so the build never counts a write
	// twice or misses one.
	writeMu sync.Mutex
	ready   atomic.Bool

	// mu guards the fields below; it is held only briefly, never across
	// a transaction, so reading the counts does not wait for an fsync.
	mu    sync.Mutex
	owner map[uint64]counted // pending sequence → whom, and its size
	by    map[string]Usage   // whom → its pending entries
	total Usage              // every pending entry
	dead  Usage              // every dead letter
	// keys are the idempotency records by identity (keyOwner), and
	// allKeys all of them: they are stored for an identity too, so
	// their bytes count against its caps.
	keys    map[string]Usage
	allKeys Usage
}

// countKey counts an idempotency record of size bytes of identity in,
// or out when sign is -1.
func (ix *pendingIndex) countKey(identity string, size int64, sign int) {
	u := ix.keys[identity]
	if u.add(size, sign); u.Entries <= 0 {
		delete(ix.keys, identity)
	} else {
		ix.keys[identity] = u
	}
	ix.allKeys.add(size, sign)
}

// counted is a pending entry as the index counts it.
type counted struct {
	against string
	size    int64
}

// CountsAgainst is whom a pending entry counts against: the message's
// Publisher, or its From for records written before Publisher existed
// (then the clientId, which was the identity). The cluster's store
// counts by it too.
func (m *Message) CountsAgainst() string {
	if m.Publisher != "" {
		return m.Publisher
	}
	return m.From
}

// CountsAgainst is whom p counts against for the bus's per-identity caps:
// a retry, the subscriber it waits on (Subscriber), since its silence is
// what keeps the entry, and so a message held for an away durable
// subscriber; a hold, the publisher (Message.CountsAgainst), and so is a
// retry stored before Subscriber existed.
func (p *Pending) CountsAgainst() string {
	if (p.Kind == KindRetry || p.Kind == KindDurable) && p.Subscriber != "" {
		return p.Subscriber
	}
	return p.Message.CountsAgainst()
}

// PendingUsage returns what the pending entries take in all, and what
// those counting against identity take (Pending.CountsAgainst). The
// bytes include the idempotency records' (IdempotentUsage): an identity
// that makes the bus keep answers pays for them as for its messages.
func (s *Store) PendingUsage(identity string) (total, mine Usage, err error) {
	ix, err := s.counts()
	if err != nil {
		return Usage{}, Usage{}, err
	}
	ix.mu.Lock()
	total, mine = ix.total, ix.by[identity]
	total.Bytes += ix.allKeys.Bytes
	mine.Bytes += ix.keys[identity].Bytes
	ix.mu.Unlock()
	return total, mine, nil
}

// DeadLetterUsage returns what the dead-letter queue takes.
func (s *Store) DeadLetterUsage() (Usage, error) {
	ix, err := s.counts()
	if err != nil {
		return Usage{}, err
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.dead, nil
}

// counts returns the index, built.
func (s *Store) counts() (*pendingIndex, error) {
	if !s.pending.ready.Load() {
		if err := s.buildPendingIndex(); err != nil {
			return nil, err
		}
	}
	return &s.pending, nil
}

// buildPendingIndex counts what the store holds. A pending record that
// does not decode counts, against no one: it still takes space, and
// Pending reports it.
func (s *Store) buildPendingIndex() error {
	ix := &s.pending
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if ix.ready.Load() {
		return nil
	}
	owner := make(map[uint64]counted)
	by := make(map[string]Usage)
	keys := make(map[string]Usage)
	var total, dead, allKeys Usage
	err := s.view(func(t tx) error {
		err := t.each(bucketPending, nil, func(k, v []byte) (bool, error) {
			var r struct {
				Kind       string `json:"kind"`
				Subscriber string `json:"subscriber"`
				Message    struct {
					From      string `json:"from"`
					Publisher string `json:"publisher"`
				} `json:"message"`
			}
			_ = json.Unmarshal(v, &r)
			p := Pending{Kind: r.Kind, Subscriber: r.Subscriber, Message: Message{From: r.Message.From, Publisher: r.Message.Publisher}}
			e := counted{against: p.CountsAgainst(), size: int64(len(v))}
			owner[seqOf(k)] = e
			u := by[e.against]
			u.add(e.size, 1)
			by[e.against] = u
			total.add(e.size, 1)
			return true, nil
		})
		if err != nil {
			return err
		}
		err = t.each(bucketIdempotency, nil, func(k, v []byte) (bool, error) {
			identity := keyOwner(k)
			u := keys[identity]
			u.add(int64(len(v)), 1)
			keys[identity] = u
			allKeys.add(int64(len(v)), 1)
			return true, nil
		})
		if err != nil {
			return err
		}
		return t.each(bucketDeadLetters, nil, func(_, v []byte) (bool, error) {
			dead.add(int64(len(v)), 1)
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	ix.mu.Lock()
	ix.owner, ix.by, ix.total, ix.dead = owner, by, total, dead
	ix.keys, ix.allKeys = keys, allKeys
	ix.mu.Unlock()
	ix.ready.Store(true)
	return nil
}

// set records that the pending entry seq, of size bytes, counts against
// whom, replacing what it was.
func (ix *pendingIndex) set(seq uint64, whom string, size int) {
	ix.remove(seq)
	e := counted{against: whom, size: int64(size)}
	ix.owner[seq] = e
	u := ix.by[whom]
	u.add(e.size, 1)
	ix.by[whom] = u
	ix.total.add(e.size, 1)
}

// remove forgets the pending entry seq, if it was counted.
func (ix *pendingIndex) remove(seq uint64) {
	e, ok := ix.owner[seq]
	if !ok {
		return
	}
	delete(ix.owner, seq)
	ix.total.add(e.size, -1)
	u := ix.by[e.against]
	if u.add(e.size, -1); u.Entries <= 0 {
		delete(ix.by, e.against)
	} else {
		ix.by[e.against] = u
	}
}

// seqOf is the sequence number of a bucket key; keys are 8 bytes, and a
// malformed one (which decode reports) counts as 0.
func seqOf(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	var n uint64
	for _, b := range k {
		n = n<<8 | uint64(b)
	}
	return n
}
