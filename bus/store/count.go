package store

import (
	"encoding/json"
	"sync"
	"sync/atomic"
)

// pendingIndex counts the pending entries in all and by publisher, so
// that the bus can enforce its caps on every publish without reading the
// store. It is built from the store on first use and kept in step by
// every write that adds or removes a pending entry.
type pendingIndex struct {
	// writeMu is held by the committer from a transaction to the update
	// of the counts, and by the build, so the build never counts a write
	// twice or misses one.
	writeMu sync.Mutex
	ready   atomic.Bool

	// mu guards the maps; it is held only briefly, never across a
	// transaction, so reading the counts does not wait for an fsync.
	mu    sync.Mutex
	owner map[uint64]string // pending sequence → publisher
	by    map[string]int    // publisher → pending entries
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

// PendingCounts returns the number of pending entries in all and the
// number whose message publisher published.
func (s *Store) PendingCounts(publisher string) (total, mine int, err error) {
	ix := &s.pending
	if !ix.ready.Load() {
		if err := s.buildPendingIndex(); err != nil {
			return 0, 0, err
		}
	}
	ix.mu.Lock()
	total, mine = len(ix.owner), ix.by[publisher]
	ix.mu.Unlock()
	return total, mine, nil
}

// buildPendingIndex counts what the store holds. A record that does not
// decode counts, under no publisher: it still takes space, and Pending
// reports it.
func (s *Store) buildPendingIndex() error {
	ix := &s.pending
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if ix.ready.Load() {
		return nil
	}
	owner := make(map[uint64]string)
	by := make(map[string]int)
	err := s.view(func(t tx) error {
		return t.each(bucketPending, nil, func(k, v []byte) (bool, error) {
			var r struct {
				Message struct {
					From      string `json:"from"`
					Publisher string `json:"publisher"`
				} `json:"message"`
			}
			_ = json.Unmarshal(v, &r)
			m := Message{From: r.Message.From, Publisher: r.Message.Publisher}
			seq := seqOf(k)
			owner[seq] = m.CountsAgainst()
			by[owner[seq]]++
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	ix.mu.Lock()
	ix.owner, ix.by = owner, by
	ix.mu.Unlock()
	ix.ready.Store(true)
	return nil
}

// set records that the entry seq is publisher's, replacing what it was.
func (ix *pendingIndex) set(seq uint64, publisher string) {
	ix.remove(seq)
	ix.owner[seq] = publisher
	ix.by[publisher]++
}

// remove forgets the entry seq, if it was counted.
func (ix *pendingIndex) remove(seq uint64) {
	old, ok := ix.owner[seq]
	if !ok {
		return
	}
	delete(ix.owner, seq)
	if ix.by[old]--; ix.by[old] <= 0 {
		delete(ix.by, old)
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
