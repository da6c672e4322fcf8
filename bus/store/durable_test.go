package store_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
)

func durableOwner(id string) *store.DurableOwner {
	return &store.DurableOwner{ClientID: id, Identity: "agents", MaxPending: 7, Waker: "spawner",
		Subscriptions: []store.DurableSubscription{
			{Pattern: "agent:" + id, Policy: "stopPropagationOnProcessed", Created: time.Date(2026, 11, 25, 20, 0, 0, 0, time.UTC)},
			{Pattern: "feed:*", Policy: "continueAll", Fallback: true, Created: time.Date(2026, 11, 25, 20, 0, 1, 0, time.UTC)},
		}}
}

// TestDurableOwnersSurviveReopen: owner records are stored, replaced,
// removed (an owner with nothing left is), and read back after the file
// is reopened.
func TestDurableOwnersSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir, nil)
	require.NoError(t, err)
	a, b := durableOwner("a"), durableOwner("b")
	require.NoError(t, s.PutDurable(b))
	require.NoError(t, s.PutDurable(a))
	gone := durableOwner("c")
	require.NoError(t, s.PutDurable(gone))
	gone.Subscriptions, gone.Waker = nil, ""
	require.NoError(t, s.PutDurable(gone))
	b.Waker = ""
	require.NoError(t, s.PutDurable(b))
	require.NoError(t, s.Close())

	s, err = store.Open(dir, nil)
	require.NoError(t, err)
	defer s.Close()
	all, err := s.DurableOwners()
	require.NoError(t, err)
	require.Equal(t, []*store.DurableOwner{a, b}, all)
}

// TestDurableRecordRules: records that break the rules are refused on
// write, and a changed byte is caught by the checksum on read.
func TestDurableRecordRules(t *testing.T) {
	for name, o := range map[string]*store.DurableOwner{
		"no client id": {Subscriptions: []store.DurableSubscription{{Pattern: "a:b", Policy: "continueAll"}}},
		"no pattern":   {ClientID: "x", Subscriptions: []store.DurableSubscription{{Policy: "continueAll"}}},
		"no policy":    {ClientID: "x", Subscriptions: []store.DurableSubscription{{Pattern: "a:b"}}},
		"twice":        {ClientID: "x", Subscriptions: []store.DurableSubscription{{Pattern: "a:b", Policy: "continueAll"}, {Pattern: "a:b", Policy: "continueAll"}}},
	} {
		_, err := store.EncodeDurable(o)
		require.ErrorIs(t, err, store.ErrInvalid, name)
	}
	v, err := store.EncodeDurable(durableOwner("a"))
	require.NoError(t, err)
	damaged := bytes.Replace(v, []byte("agents"), []byte("agentz"), 1)
	_, err = store.DecodeDurable("a", damaged)
	require.ErrorIs(t, err, store.ErrDamaged)
	require.ErrorContains(t, err, "checksum")
	_, err = store.DecodeDurable("b", v)
	require.ErrorContains(t, err, `record has id "a"`)
}

// FuzzDecodeDurable: any bytes decode to an error or to an owner that
// encodes to a stable form; never a panic.
func FuzzDecodeDurable(f *testing.F) {
	v, err := store.EncodeDurable(durableOwner("a"))
	require.NoError(f, err)
	f.Add(v)
	for _, s := range []string{"", "{}", `{"v":2,"clientId":"a"}`, `{"v":1,"clientId":"a","subscriptions":[{"pattern":"x","policy":"y"}]}`, "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		o, err := store.DecodeDurable("a", value)
		if err != nil {
			require.ErrorContains(t, err, `decode durable record of "a": `)
			return
		}
		again, err := store.EncodeDurable(o)
		require.NoError(t, err)
		back, err := store.DecodeDurable("a", again)
		require.NoError(t, err)
		stable, err := store.EncodeDurable(back)
		require.NoError(t, err)
		require.Equal(t, string(again), string(stable))
	})
}
