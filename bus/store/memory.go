package store

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"sync"
)

// memory is the store OpenMemory returns: maps under a mutex. A write
// transaction keeps an undo log and replays it backwards if fn fails, so
// it is as all-or-nothing as a bbolt transaction.
type memory struct {
	// mu guards the fields below. Writers hold it exclusively for the
	// whole transaction, as bbolt's single writer does.
	mu        sync.RWMutex
	closed    bool
	buckets   map[bucket]map[string][]byte
	sequences map[bucket]uint64
}

func newMemory() *memory {
	return &memory{
		buckets:   map[bucket]map[string][]byte{bucketMeta: {}, bucketPending: {}, bucketDeadLetters: {}, bucketIdempotency: {}, bucketDurable: {}, bucketToolSubscriptions: {}, bucketWebhooks: {}},
		sequences: map[bucket]uint64{},
	}
}

func (m *memory) update(fn func(tx) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	t := &memoryTx{m: m, writable: true}
	committed := false
	// Deferred, so that a panic in fn (which the committer recovers)
	// keeps nothing either, as bbolt's rollback does.
	defer func() {
		if !committed {
			for _, undo := range slices.Backward(t.undo) {
				undo()
			}
		}
	}()
	err := fn(t)
	committed = err == nil
	return err
}

func (m *memory) view(fn func(tx) error) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return ErrClosed
	}
	return fn(&memoryTx{m: m})
}

func (m *memory) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.buckets = nil
	return nil
}

// errReadOnly is bbolt's ErrTxNotWritable, for the memory store.
var errReadOnly = errors.New("tx not writable")

type memoryTx struct {
	m        *memory
	writable bool
	undo     []func()
}

func (t *memoryTx) get(b bucket, k []byte) []byte {
	return t.m.buckets[b][string(k)]
}

func (t *memoryTx) put(b bucket, k, v []byte) error {
	if !t.writable {
		return errReadOnly
	}
	t.remember(b, k)
	t.m.buckets[b][string(k)] = bytes.Clone(v)
	return nil
}

func (t *memoryTx) delete(b bucket, k []byte) error {
	if !t.writable {
		return errReadOnly
	}
	t.remember(b, k)
	delete(t.m.buckets[b], string(k))
	return nil
}

// remember logs how to restore key k of bucket b to its present state.
func (t *memoryTx) remember(b bucket, k []byte) {
	m, key := t.m.buckets[b], string(k)
	old, existed := m[key]
	t.undo = append(t.undo, func() {
		if existed {
			m[key] = old
		} else {
			delete(m, key)
		}
	})
}

func (t *memoryTx) nextSequence(b bucket) (uint64, error) {
	if !t.writable {
		return 0, errReadOnly
	}
	old := t.m.sequences[b]
	t.undo = append(t.undo, func() { t.m.sequences[b] = old })
	t.m.sequences[b] = old + 1
	return old + 1, nil
}

func (t *memoryTx) sequence(b bucket) uint64 {
	return t.m.sequences[b]
}

func (t *memoryTx) each(b bucket, from []byte, fn func(k, v []byte) (bool, error)) error {
	m := t.m.buckets[b]
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k < string(from) {
			continue
		}
		if more, err := fn([]byte(k), m[k]); err != nil || !more {
			return err
		}
	}
	return nil
}

func (t *memoryTx) count(b bucket) int {
	return len(t.m.buckets[b])
}

var _ tx = (*memoryTx)(nil)
