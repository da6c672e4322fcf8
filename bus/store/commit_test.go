package store_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// gate holds a store's first commit, after it has committed, until
// released, so that the writes made meanwhile queue up; it counts the
// commits.
type gate struct {
	commits  atomic.Int32
	release  chan struct{}
	released atomic.Bool
}

func newGate(s *store.Store) *gate {
	g := &gate{release: make(chan struct{})}
	store.SetOnCommit(s, func(time.Duration) {
		if g.commits.Add(1) == 1 {
			<-g.release
		}
	})
	return g
}

// hold starts write, the store's first, and returns once it has
// committed and is held in the gate; its error arrives on the channel.
func (g *gate) hold(t *testing.T, write func() error) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- write() }()
	require.Eventually(t, func() bool { return g.commits.Load() > 0 }, 10*time.Second, time.Millisecond, "the first commit never happened")
	return done
}

func (g *gate) open() {
	g.released.Store(true)
	close(g.release)
}

// queue starts write on its own goroutine and returns once it is queued
// behind the held commit, so that writes queue in the order given. The
// write's error arrives on the channel returned; the write must not
// return before the gate opens.
func (g *gate) queue(t *testing.T, s *store.Store, write func() error) <-chan error {
	t.Helper()
	before := store.Queued(s)
	done := make(chan error, 1)
	go func() {
		err := write()
		assert.True(t, g.released.Load(), "a write returned before its commit")
		done <- err
	}()
	require.Eventually(t, func() bool { return store.Queued(s) != before }, 10*time.Second, time.Millisecond, "the write was never queued")
	return done
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("a write never returned")
		return nil
	}
}

// TestGroupCommit: writes queued while a commit runs share the next one,
// one transaction and one fsync; a write that fails in it gets its own
// error and changes nothing (not even the sequence), and the others are
// committed, in queue order, as if each had run alone.
func TestGroupCommit(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		g := newGate(s)
		first := g.hold(t, func() error {
			_, err := s.DeadLetter("", deadLetter(1, "agent:bob", protocol.ReasonNoSubscribers, at(1)))
			return err
		})

		ok1, unassigned, requeued, again, ok3 := retry(1, at(1)), retry(2, at(2)), hold(3, at(3)), hold(4, at(4)), retry(5, at(5))
		unassigned.ID = "p-000000000999"
		writes := []<-chan error{
			g.queue(t, s, func() error { return s.PutPending(ok1) }),
			g.queue(t, s, func() error { return s.PutPending(unassigned) }),
			g.queue(t, s, func() error { return s.Requeue("d-1", requeued) }),
			g.queue(t, s, func() error { return s.Requeue("d-1", again) }),
			g.queue(t, s, func() error { return s.PutPending(ok3) }),
		}
		g.open()
		require.NoError(t, wait(t, first))
		errs := make([]error, len(writes))
		for i, w := range writes {
			errs[i] = wait(t, w)
		}
		assert.NoError(t, errs[0])
		assert.ErrorIs(t, errs[1], store.ErrInvalid)
		assert.NoError(t, errs[2])
		assert.ErrorIs(t, errs[3], store.ErrNotFound, "the requeue before it in the same batch took d-1")
		assert.NoError(t, errs[4])
		assert.Equal(t, int32(2), g.commits.Load(), "the queued writes share one commit")

		assert.Equal(t, []string{"p-000000000001", "p-000000000002", "", "p-000000000003"},
			[]string{ok1.ID, requeued.ID, again.ID, ok3.ID}, "failed writes take no id")
		all, err := s.Pending()
		require.NoError(t, err)
		var ids []string
		for _, p := range all {
			ids = append(ids, p.ID)
		}
		assert.Equal(t, []string{"p-000000000001", "p-000000000002", "p-000000000003"}, ids)
		assertCounts(t, s, 3, 0)
		total, _, err := s.PendingUsage("")
		require.NoError(t, err)
		assert.Equal(t, 3, total.Entries)
	})
}

// TestGroupCommitFailsTogether: when the shared commit itself fails,
// every write in it gets the error and none is kept; the store goes on.
func TestGroupCommitFailsTogether(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		g := newGate(s)
		first := g.hold(t, func() error { return s.PutPending(hold(1, at(1))) })
		writes := []<-chan error{
			g.queue(t, s, func() error { return s.PutPending(hold(2, at(2))) }),
			g.queue(t, s, func() error { return store.Write(s, func() error { panic("page 7 is not a leaf") }) }),
			g.queue(t, s, func() error { return s.PutPending(hold(3, at(3))) }),
		}
		g.open()
		require.NoError(t, wait(t, first))
		for _, w := range writes {
			err := wait(t, w)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "page 7 is not a leaf")
			assert.False(t, errors.Is(err, store.ErrInvalid))
		}
		assertCounts(t, s, 1, 0)
		require.NoError(t, s.PutPending(hold(4, at(4))))
		assertCounts(t, s, 2, 0)
	})
}

// TestCloseWaitsForQueuedWrites: a write racing Close either fails with
// ErrClosed or is in the file when the store is opened again; Close
// commits what was queued before it.
func TestCloseWaitsForQueuedWrites(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir, nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var stored atomic.Int32
	for i := range 20 {
		wg.Go(func() {
			if err := s.PutPending(hold(i, at(i))); err == nil {
				stored.Add(1)
			} else {
				assert.ErrorIs(t, err, store.ErrClosed)
			}
		})
	}
	require.NoError(t, s.Close())
	wg.Wait()
	s, err = store.Open(dir, nil)
	require.NoError(t, err)
	defer s.Close()
	assertCounts(t, s, int(stored.Load()), 0)
}
