// Package keylock serializes work per key (the requests that use one
// idempotency key, whichever door they came through) without a lock kept
// for every key ever seen: a key's lock exists while someone holds or
// waits for it. It knows nothing of the bus: the bus imports it
// (bus/idempotency.go).
package keylock

import "sync"

// Locks are the locks of keys. The zero value is ready for use.
type Locks struct {
	// mu guards all; it is a leaf: nothing is locked under it.
	mu  sync.Mutex
	all map[string]*lock
}

// lock is the lock of one key, with the callers holding or waiting for
// it.
type lock struct {
	mu    sync.Mutex
	users int
}

// Lock takes k's lock, waiting while another caller holds it, and
// returns the unlock, to call once.
func (h *Locks) Lock(k string) (unlock func()) {
	h.mu.Lock()
	if h.all == nil {
		h.all = make(map[string]*lock)
	}
	l := h.all[k]
	if l == nil {
		l = &lock{}
		h.all[k] = l
	}
	l.users++
	h.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		h.mu.Lock()
		if l.users--; l.users == 0 {
			delete(h.all, k)
		}
		h.mu.Unlock()
	}
}
