// Package slots counts what keys hold of a bounded kind (an identity's
// connections, its event streams): a key takes a slot while it holds
// fewer than its bound and gives it back once. It knows nothing of the
// bus: the bus imports it (bus/identity_limits.go).
package slots

import "sync"

// Slots are the slots keys hold. The zero value is ready for use.
type Slots struct {
	// mu guards held; it is a leaf: nothing is locked under it.
	mu   sync.Mutex
	held map[string]int
}

// Take takes one of key's slots if it holds fewer than bound (a
// negative bound is no limit), and returns its release, which gives it
// back on its first call only; nil and the number held when key holds
// its bound.
func (t *Slots) Take(key string, bound int) (release func(), held int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.held[key]
	if bound >= 0 && n >= bound {
		return nil, n
	}
	if t.held == nil {
		t.held = make(map[string]int)
	}
	t.held[key] = n + 1
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.held[key]--; t.held[key] <= 0 {
				delete(t.held, key)
			}
		})
	}, 0
}
