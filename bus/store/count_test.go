package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
)

func requireCounts(t *testing.T, s *store.Store, publisher string, total, mine int) {
	t.Helper()
	gotTotal, gotMine, err := s.PendingUsage(publisher)
	require.NoError(t, err)
	require.Equal(t, [2]int{total, mine}, [2]int{gotTotal.Entries, gotMine.Entries}, "pending in all and by %q", publisher)
	requireBytes(t, s)
}

// requireBytes checks the bytes the counts hold against the records the
// store holds.
func requireBytes(t *testing.T, s *store.Store) {
	t.Helper()
	pending, dead, err := store.StoredBytes(s)
	require.NoError(t, err)
	total, _, err := s.PendingUsage("")
	require.NoError(t, err)
	require.Equal(t, pending, total, "pending usage")
	got, err := s.DeadLetterUsage()
	require.NoError(t, err)
	require.Equal(t, dead, got, "dead-letter usage")
}

// TestPendingCounts follows the counts by publisher through every write
// that adds or removes pending entries.
func TestPendingCounts(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		hold := func(publisher string) *store.Pending {
			m := message(1, "agent:x")
			m.Publisher = publisher
			p := &store.Pending{Kind: store.KindHold, Message: m, NextAt: at(1)}
			require.NoError(t, s.PutPending(p))
			return p
		}
		a1, _, b1 := hold("a"), hold("a"), hold("b")
		requireCounts(t, s, "a", 3, 2)
		requireCounts(t, s, "b", 3, 1)

		// Replacing an entry does not count it twice.
		require.NoError(t, s.PutPending(a1))
		requireCounts(t, s, "a", 3, 2)

		require.NoError(t, s.DeletePending(a1.ID))
		requireCounts(t, s, "a", 2, 1)

		id, err := s.DeadLetter(b1.ID, &store.DeadLetter{Message: b1.Message, Reason: "no_subscribers"})
		require.NoError(t, err)
		requireCounts(t, s, "b", 1, 0)

		r := &store.Pending{Kind: store.KindRetry, Message: b1.Message, ClientID: "c", Subscription: "agent:*", NextAt: at(2)}
		require.NoError(t, s.Requeue(id, r))
		requireCounts(t, s, "b", 2, 1)

		// A retry that names the subscriber it waits on counts against
		// it, not against the publisher.
		r.Subscriber = "slow"
		require.NoError(t, s.PutPending(r))
		requireCounts(t, s, "b", 2, 0)
		requireCounts(t, s, "slow", 2, 1)

		// Bytes follow every dead-letter write too.
		d1, err := s.DeadLetter(r.ID, &store.DeadLetter{Message: r.Message, Reason: "max_retries"})
		require.NoError(t, err)
		_, err = s.DeadLetter("", &store.DeadLetter{Message: message(2, "agent:y"), Reason: "no_subscribers"})
		require.NoError(t, err)
		_, err = s.DeadLetter("", &store.DeadLetter{Message: message(3, "agent:z"), Reason: "no_subscribers"})
		require.NoError(t, err)
		requireBytes(t, s)
		require.NoError(t, s.RemoveDeadLetter(d1))
		requireBytes(t, s)
		n, err := s.PurgeDeadLetters(store.Filter{Topic: "agent:y"})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		requireBytes(t, s)
		_, err = s.PurgeDeadLetters(store.Filter{})
		require.NoError(t, err)
		requireBytes(t, s)
		u, err := s.DeadLetterUsage()
		require.NoError(t, err)
		require.Equal(t, store.Usage{}, u)
	})
}

// TestPendingCountsRebuilt checks that counts come back after a restart,
// and that a record written before Publisher existed counts against its
// From.
func TestPendingCountsRebuilt(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir, nil)
	require.NoError(t, err)
	m := message(1, "agent:x")
	m.Publisher = "ident"
	require.NoError(t, s.PutPending(&store.Pending{Kind: store.KindHold, Message: m, NextAt: at(1)}))
	old := []byte(`{"v":1,"id":"p-000000000002","kind":"hold","message":{"id":"m-2","topic":"agent:x","from":"legacy"},"nextAt":"2026-03-01T12:00:00Z"}`)
	require.NoError(t, store.PutRaw(s, "p-000000000002", old))
	require.NoError(t, s.Close())

	s, err = store.Open(dir, nil)
	require.NoError(t, err)
	defer s.Close()
	requireCounts(t, s, "ident", 2, 1)
	requireCounts(t, s, "legacy", 2, 1)
	u, err := s.DeadLetterUsage()
	require.NoError(t, err)
	require.Equal(t, store.Usage{}, u)
	pending, err := s.Pending()
	require.NoError(t, err)
	require.Len(t, pending, 2, "the old record stays readable")
}
