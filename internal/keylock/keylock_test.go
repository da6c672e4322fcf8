package keylock

import (
	"sync"
	"testing"
	"time"
)

// TestOneKeyAtATime: a caller of another key does not wait for a held
// key, the next caller of a key gets it once it is unlocked, and no lock
// is kept once nobody holds or waits for its key.
func TestOneKeyAtATime(t *testing.T) {
	var locks Locks
	unlockA := locks.Lock("a")

	// Another key is free while "a" is held.
	done := make(chan struct{})
	go func() {
		locks.Lock("b")()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal(`Lock("b") waited for "a"`)
	}

	// A second caller of "a" gets it once the first unlocks.
	entered := make(chan func())
	go func() { entered <- locks.Lock("a") }()
	unlockA()
	(<-entered)()
	if len(locks.all) != 0 {
		t.Fatalf("locks kept with nobody holding them: %v", locks.all)
	}
}

// TestManyCallers: concurrent callers of a few keys never overlap on one
// key (inside is unguarded: the race detector would see two at once),
// and leave no lock behind.
func TestManyCallers(t *testing.T) {
	var locks Locks
	var wg sync.WaitGroup
	inside := make([]int, 3)
	for i := range 60 {
		wg.Go(func() {
			k := i % len(inside)
			unlock := locks.Lock(string(rune('a' + k)))
			inside[k]++
			if inside[k] != 1 {
				t.Errorf("key %d held by %d callers at once", k, inside[k])
			}
			inside[k]--
			unlock()
		})
	}
	wg.Wait()
	if len(locks.all) != 0 {
		t.Fatalf("locks kept with nobody holding them: %v", locks.all)
	}
}
