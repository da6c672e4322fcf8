package store

import (
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// Group commit: every write of the Store goes through one committer
// goroutine, which puts all the writes queued while the previous commit
// was running into one transaction, so that they share one fsync. A write
// returns only once the transaction holding it has committed (fsync
// included), so nothing a caller acknowledges can be lost; at low load a
// write finds the committer idle and is committed at once, alone, with no
// added delay.
//
// bbolt's own DB.Batch does the same job differently, and does not fit:
// it waits up to MaxBatchDelay (10 ms by default) for company before it
// commits, so a lone retry would wait 10 ms for nothing; a delay of 0
// turns batching off (each batch detaches before it commits, so writes
// arriving during an fsync each start their own); and it runs a batch's
// functions a second time, each alone, when one fails. The committer
// commits as soon as the previous commit is done, gathering whatever
// queued meanwhile, so batches grow with the load and not with a timer.
// It too reruns functions (see commitBatch), so a write's function must
// only change the transaction and variables it overwrites on each run.

// maxBatch bounds the writes in one transaction. bbolt keeps a
// transaction's dirty pages in memory until it commits, and a held
// message may be large; 128 writes per fsync is already far past the
// ~10,000 writes/s the bus needs even at several ms per fsync.
const maxBatch = 128

// write is one queued write.
type write struct {
	// fn makes the write's changes in the batch's transaction. It may run
	// more than once (commitBatch), each time on the same state.
	fn func(tx) error
	// apply, if set, updates the pending counts once the write committed.
	apply func(*pendingIndex)
	done  chan error
}

// committer queues writes for the goroutine that commits them. The
// goroutine runs only while there are writes: the first write to find it
// idle starts it, and it returns when the queue is empty, so an idle
// store (or one never closed, as tests leave memory stores) holds no
// goroutine.
type committer struct {
	mu      sync.Mutex
	queue   []*write
	running bool
	closed  bool
	// active counts the running committer, for Close to wait on.
	active sync.WaitGroup
}

// newStore returns a Store on db.
func newStore(db backend, onCommit func(time.Duration)) *Store {
	return &Store{db: db, onCommit: onCommit}
}

// update commits fn, in a transaction it may share with other writes.
func (s *Store) update(fn func(tx) error) error {
	return s.updatePending(fn, nil)
}

// updatePending commits fn and, once it has committed, applies its effect
// on the pending counts with apply (if not nil), before it returns.
func (s *Store) updatePending(fn func(tx) error, apply func(*pendingIndex)) error {
	w := &write{fn: fn, apply: apply, done: make(chan error, 1)}
	c := &s.commits
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.queue = append(c.queue, w)
	if !c.running {
		c.running = true
		c.active.Add(1)
		go s.commitLoop()
	}
	c.mu.Unlock()
	return s.where(<-w.done)
}

// commitLoop commits queued writes, up to maxBatch at a time, until the
// queue is empty.
func (s *Store) commitLoop() {
	c := &s.commits
	defer c.active.Done()
	// A store file damaged under the bus makes bbolt fault through its
	// map (a SIGBUS when the file shrank): as a panic this goroutine can
	// recover, and fail the batch, instead of killing the process.
	debug.SetPanicOnFault(true)
	var batch []*write
	for {
		c.mu.Lock()
		n := min(len(c.queue), maxBatch)
		if n == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		batch = append(batch[:0], c.queue[:n]...)
		c.queue = slices.Delete(c.queue, 0, n)
		c.mu.Unlock()
		s.commitBatch(batch)
		clear(batch)
	}
}

// commitBatch commits batch in one transaction and tells every writer how
// it went. A write whose fn fails changes nothing, as if it ran alone
// after the writes before it: the transaction is rolled back, that writer
// gets its error, and the rest of the batch runs again without it. Each
// fn then runs again on the same state as before, so it does the same.
// When the commit itself fails (the disk, a closed store, a panic on a
// damaged file), every writer of the batch gets the error.
func (s *Store) commitBatch(batch []*write) {
	ix := &s.pending
	// The count build must see each write either in the store and
	// applied, or in neither (pending.go).
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	for len(batch) > 0 {
		failed := -1
		start := time.Now()
		err := s.safeUpdate(func(t tx) error {
			for i, w := range batch {
				if err := w.fn(t); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		switch {
		case failed >= 0:
			batch[failed].done <- err
			batch = slices.Delete(batch, failed, failed+1)
			continue
		case err != nil:
			for _, w := range batch {
				w.done <- err
			}
			return
		}
		if s.onCommit != nil {
			s.onCommit(time.Since(start))
		}
		if ix.ready.Load() {
			ix.mu.Lock()
			for _, w := range batch {
				if w.apply != nil {
					w.apply(ix)
				}
			}
			ix.mu.Unlock()
		}
		for _, w := range batch {
			w.done <- nil
		}
		return
	}
}

// safeUpdate runs one transaction and turns a panic in it (bbolt asserts
// with panics on pages it does not expect) into an error.
func (s *Store) safeUpdate(fn func(tx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("commit failed with a panic (a damaged file?): %v", r)
		}
	}()
	return s.db.update(fn)
}

// Close waits for the writes already queued, then releases the store;
// for the file store, its lock. Methods called afterwards return
// ErrClosed.
func (s *Store) Close() error {
	c := &s.commits
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	// No committer starts once closed is set, so this cannot miss one.
	c.active.Wait()
	return s.db.close()
}
