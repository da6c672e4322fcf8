package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// This file is the conformance suite: every test runs against the file
// store and the memory store, which must behave alike.

// implementations open an empty store of each kind; the store is closed
// when the test ends.
var implementations = []struct {
	name string
	open func(t testing.TB) *store.Store
}{
	{"file", func(t testing.TB) *store.Store {
		s, err := store.Open(t.TempDir(), nil)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, s.Close()) })
		return s
	}},
	{"memory", func(t testing.TB) *store.Store {
		s := store.OpenMemory()
		t.Cleanup(func() { assert.NoError(t, s.Close()) })
		return s
	}},
}

// forEachStore runs test as a subtest against each implementation.
func forEachStore(t *testing.T, test func(t *testing.T, s *store.Store)) {
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) { test(t, impl.open(t)) })
	}
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at returns epoch plus n seconds.
func at(n int) time.Time { return epoch.Add(time.Duration(n) * time.Second) }

func message(n int, topic string) store.Message {
	return store.Message{
		ID:          fmt.Sprintf("m-%d", n),
		Topic:       topic,
		From:        "publisher",
		Payload:     json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)),
		Meta:        json.RawMessage(`{"trace":"t"}`),
		PublishedAt: at(n),
	}
}

func retry(n int, next time.Time) *store.Pending {
	return &store.Pending{
		Kind:         store.KindRetry,
		Message:      message(n, "agent:alice"),
		ClientID:     "alice",
		Subscription: "agent:*",
		Attempts:     []store.Attempt{{At: at(n)}, {At: at(n + 1), Error: "timeout after 30s"}},
		NextAt:       next,
	}
}

func hold(n int, next time.Time) *store.Pending {
	return &store.Pending{Kind: store.KindHold, Message: message(n, "agent:bob"), NextAt: next}
}

func deadLetter(n int, topic, reason string, deadAt time.Time) *store.DeadLetter {
	return &store.DeadLetter{
		Message:      message(n, topic),
		ClientID:     "alice",
		Subscription: "agent:*",
		Reason:       reason,
		Attempts:     []store.Attempt{{At: at(n), Error: "no"}, {At: at(n + 5), Error: "still no"}},
		DeadAt:       deadAt,
	}
}

func TestPutPending(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		a, b := retry(1, at(20)), hold(2, at(10))
		require.NoError(t, s.PutPending(a))
		require.NoError(t, s.PutPending(b))
		assert.Equal(t, "p-000000000001", a.ID)
		assert.Equal(t, "p-000000000002", b.ID)

		all, err := s.Pending()
		require.NoError(t, err)
		assert.Equal(t, []*store.Pending{b, a}, all, "ordered by NextAt")

		// Replacing keeps the ID and the count.
		a.Attempts = append(a.Attempts, store.Attempt{At: at(21), Error: "refused"})
		a.NextAt = at(5)
		require.NoError(t, s.PutPending(a))
		assert.Equal(t, "p-000000000001", a.ID)
		all, err = s.Pending()
		require.NoError(t, err)
		assert.Equal(t, []*store.Pending{a, b}, all)
		assertCounts(t, s, 2, 0)
	})
}

func TestPendingTiesInIDOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		var want []string
		for i := range 5 {
			p := hold(i, at(7))
			require.NoError(t, s.PutPending(p))
			want = append(want, p.ID)
		}
		all, err := s.Pending()
		require.NoError(t, err)
		var got []string
		for _, p := range all {
			got = append(got, p.ID)
		}
		assert.Equal(t, want, got)
	})
}

func TestPutPendingRejects(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(p *store.Pending)
		invalid bool // the error wraps ErrInvalid
		want    string
	}{
		{"unknown kind", func(p *store.Pending) { p.Kind = "later" }, true, `kind "later"`},
		{"retry without client", func(p *store.Pending) { p.ClientID = "" }, true, "needs a client id"},
		{"retry without subscription", func(p *store.Pending) { p.Subscription = "" }, true, "needs a client id and a subscription"},
		{"hold with client", func(p *store.Pending) { p.Kind = store.KindHold }, true, "a hold has no client id"},
		{"retry asked by", func(p *store.Pending) { p.AskedBy = "spawner" }, true, "only a hold names the client"},
		{"malformed id", func(p *store.Pending) { p.ID = "d-1" }, true, `malformed id "d-1"`},
		{"zero id", func(p *store.Pending) { p.ID = "p-0" }, true, `malformed id "p-0"`},
		{"id not assigned", func(p *store.Pending) { p.ID = "p-99" }, true, "p-99 was not assigned"},
		{"payload not JSON", func(p *store.Pending) { p.Message.Payload = json.RawMessage("{") }, true, "payload is not valid JSON"},
		{"meta not JSON", func(p *store.Pending) { p.Message.Meta = json.RawMessage("x") }, true, "meta is not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, s *store.Store) {
				p := retry(1, at(1))
				tt.edit(p)
				id := p.ID
				err := s.PutPending(p)
				require.Error(t, err)
				assert.Contains(t, err.Error(), "put pending ")
				assert.Contains(t, err.Error(), tt.want)
				assert.Equal(t, tt.invalid, errors.Is(err, store.ErrInvalid), "errors.Is(ErrInvalid): %v", err)
				assert.Equal(t, id, p.ID, "ID unchanged on failure")
				assertCounts(t, s, 0, 0)
			})
		})
	}
	forEachStore(t, func(t *testing.T, s *store.Store) {
		assert.ErrorIs(t, s.PutPending(nil), store.ErrInvalid)
	})
}

// TestHoldAskedByKept: the fallback that asked a hold to wait survives a
// reopen, so its own reconnect does not wake the hold after a restart.
func TestHoldAskedByKept(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	p := hold(1, at(1))
	p.AskedBy = "spawner"
	require.NoError(t, s.PutPending(p))
	s = reopen(t, s, dir)
	all, err := s.Pending()
	require.NoError(t, err)
	assert.Equal(t, []*store.Pending{p}, all)
}

func TestPayloadKept(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		p := hold(1, at(1))
		p.Message.Payload = json.RawMessage(`{"html":"<b>&amp;</b>","text":"é\u00e9","n":1.50,"list":[]}`)
		p.Message.Meta = json.RawMessage(`"a string"`)
		require.NoError(t, s.PutPending(p))
		all, err := s.Pending()
		require.NoError(t, err)
		require.Len(t, all, 1)
		assert.Equal(t, string(p.Message.Payload), string(all[0].Message.Payload))
		assert.Equal(t, string(p.Message.Meta), string(all[0].Message.Meta))

		p.Message.Payload = json.RawMessage("{ \"spaced\" : [ 1, 2 ] }\n")
		require.NoError(t, s.PutPending(p))
		all, err = s.Pending()
		require.NoError(t, err)
		assert.Equal(t, `{"spaced":[1,2]}`, string(all[0].Message.Payload), "whitespace is not kept")
	})
}

// TestPendingSchedule: the schedule is Pending without payloads and
// meta, and LoadMessage brings them back from the store.
func TestPendingSchedule(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		a, b, c := retry(1, at(3)), hold(2, at(1)), hold(3, at(2))
		b.Message.Payload = json.RawMessage(`{"big":"` + strings.Repeat("x", 1<<16) + `"}`)
		b.AskedBy = "spawner"
		for _, p := range []*store.Pending{a, b, c} {
			require.NoError(t, s.PutPending(p))
		}
		full, err := s.Pending()
		require.NoError(t, err)
		schedule, err := s.PendingSchedule()
		require.NoError(t, err)
		require.Len(t, schedule, len(full))
		for i, p := range schedule {
			assert.Nil(t, p.Message.Payload)
			assert.Nil(t, p.Message.Meta)
			require.NoError(t, s.LoadMessage(p))
			assert.Equal(t, full[i], p, "entry %d, once loaded", i)
		}
		assert.Equal(t, []string{b.ID, c.ID, a.ID}, []string{schedule[0].ID, schedule[1].ID, schedule[2].ID}, "by NextAt")

		require.NoError(t, s.DeletePending(c.ID))
		err = s.LoadMessage(schedule[1])
		assert.ErrorIs(t, err, store.ErrNotFound)
		assert.ErrorContains(t, err, "load message of pending "+c.ID+": ")
		assert.ErrorIs(t, s.LoadMessage(&store.Pending{ID: "nonsense"}), store.ErrInvalid)
		other := *schedule[0]
		other.Message.ID = "m-other"
		assert.ErrorContains(t, s.LoadMessage(&other), `the stored entry is for message "m-2", not "m-other"`)
	})
}

func TestPendingIsACopy(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		p := retry(1, at(1))
		require.NoError(t, s.PutPending(p))
		p.Attempts[0].Error = "changed after put"
		p.Message.Payload[1] = 'X'

		all, err := s.Pending()
		require.NoError(t, err)
		require.Len(t, all, 1)
		assert.Equal(t, "", all[0].Attempts[0].Error)
		assert.JSONEq(t, `{"n":1}`, string(all[0].Message.Payload))

		all[0].Attempts = nil
		again, err := s.Pending()
		require.NoError(t, err)
		assert.Len(t, again[0].Attempts, 2)
	})
}

func TestDeletePending(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		a, b := retry(1, at(1)), hold(2, at(2))
		require.NoError(t, s.PutPending(a))
		require.NoError(t, s.PutPending(b))
		require.NoError(t, s.DeletePending(a.ID))
		require.NoError(t, s.DeletePending(a.ID), "deleting a missing id is not an error")
		require.NoError(t, s.DeletePending("p-12345"))
		all, err := s.Pending()
		require.NoError(t, err)
		assert.Equal(t, []*store.Pending{b}, all)

		err = s.DeletePending("nonsense")
		assert.ErrorIs(t, err, store.ErrInvalid)
		assert.ErrorContains(t, err, `delete pending nonsense: invalid argument: malformed id "nonsense"`)
	})
}

func TestDeadLetter(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		p, other := retry(1, at(1)), hold(2, at(2))
		require.NoError(t, s.PutPending(p))
		require.NoError(t, s.PutPending(other))

		d := deadLetter(1, "agent:alice", protocol.ReasonMaxRetries, at(30))
		id, err := s.DeadLetter(p.ID, d)
		require.NoError(t, err)
		assert.Equal(t, "d-000000000001", id)
		assert.Equal(t, id, d.ID)
		assert.Equal(t, at(1), d.FirstAttempt, "filled from Attempts")
		assert.Equal(t, at(6), d.LastAttempt)

		all, err := s.Pending()
		require.NoError(t, err)
		assert.Equal(t, []*store.Pending{other}, all, "the pending entry left in the same commit")

		got, err := s.GetDeadLetter(id)
		require.NoError(t, err)
		assert.Equal(t, d, got)
		got, err = s.GetDeadLetter("d-1")
		require.NoError(t, err, "ids parse without their zero padding")
		assert.Equal(t, d, got)

		// No pending entry, no attempts, no DeadAt: held with no subscriber.
		d2 := &store.DeadLetter{Message: message(2, "agent:bob"), Reason: protocol.ReasonNoSubscribers}
		before := time.Now()
		id2, err := s.DeadLetter("", d2)
		require.NoError(t, err)
		assert.Equal(t, "d-000000000002", id2)
		assert.WithinRange(t, d2.DeadAt, before.Add(-time.Second), time.Now().Add(time.Second))
		assert.True(t, d2.FirstAttempt.IsZero())
		got, err = s.GetDeadLetter(id2)
		require.NoError(t, err)
		assert.Equal(t, d2, got)

		// A pending id that is gone already is not an error.
		_, err = s.DeadLetter(p.ID, deadLetter(3, "x", protocol.ReasonRejected, at(40)))
		require.NoError(t, err)

		assertCounts(t, s, 1, 3)
	})
}

func TestDeadLetterRejects(t *testing.T) {
	tests := []struct {
		name      string
		pendingID string
		dead      *store.DeadLetter
		want      string
	}{
		{"nil", "", nil, "nil dead letter"},
		{"unknown reason", "p-1", deadLetter(1, "t", "bored", at(1)), `reason "bored"`},
		{"no reason", "p-1", deadLetter(1, "t", "", at(1)), `reason ""`},
		{"malformed pending id", "x", deadLetter(1, "t", protocol.ReasonRejected, at(1)), `malformed id "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, s *store.Store) {
				require.NoError(t, s.PutPending(retry(1, at(1))))
				id, err := s.DeadLetter(tt.pendingID, tt.dead)
				assert.ErrorIs(t, err, store.ErrInvalid)
				assert.ErrorContains(t, err, tt.want)
				assert.Empty(t, id)
				assertCounts(t, s, 1, 0) // the pending entry stays
			})
		})
	}
}

func TestGetDeadLetterErrors(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		_, err := s.GetDeadLetter("d-000000000007")
		assert.ErrorIs(t, err, store.ErrNotFound)
		assert.EqualError(t, err, "get dead letter d-000000000007: not found")

		for _, id := range []string{"", "7", "p-7", "d-", "d-x", "d--1", "d-0", "d-99999999999999999999999"} {
			_, err := s.GetDeadLetter(id)
			assert.ErrorIs(t, err, store.ErrInvalid, "id %q", id)
		}
	})
}

// fill adds dead letters with topics, reasons and DeadAt times that the
// filter tests below select from, and returns their ids in order.
func fill(t *testing.T, s *store.Store) []string {
	rows := []struct {
		topic, reason string
		deadAt        int
	}{
		{"agent:alice", protocol.ReasonMaxRetries, 10},     // 0
		{"agent:bob", protocol.ReasonNoSubscribers, 20},    // 1
		{"orders.created", protocol.ReasonRejected, 30},    // 2
		{"orders.paid", protocol.ReasonMaxRetries, 40},     // 3
		{"agent:alice", protocol.ReasonSubscriberGone, 50}, // 4
		{"system:alerts", protocol.ReasonRejected, 60},     // 5
	}
	var ids []string
	for i, r := range rows {
		id, err := s.DeadLetter("", deadLetter(i, r.topic, r.reason, at(r.deadAt)))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

var filterTests = []struct {
	name   string
	filter store.Filter
	want   []int // indexes into fill's rows
}{
	{"all", store.Filter{}, []int{0, 1, 2, 3, 4, 5}},
	{"exact topic", store.Filter{Topic: "agent:alice"}, []int{0, 4}},
	{"wildcard topic", store.Filter{Topic: "agent:*"}, []int{0, 1, 4}},
	{"prefix-like topic", store.Filter{Topic: "orders.*"}, []int{2, 3}},
	{"topic nothing matches", store.Filter{Topic: "nobody"}, nil},
	{"reason", store.Filter{Reason: protocol.ReasonRejected}, []int{2, 5}},
	{"since inclusive", store.Filter{Since: at(40)}, []int{3, 4, 5}},
	{"until exclusive", store.Filter{Until: at(30)}, []int{0, 1}},
	{"time range", store.Filter{Since: at(20), Until: at(50)}, []int{1, 2, 3}},
	{"all fields", store.Filter{Topic: "agent:*", Reason: protocol.ReasonMaxRetries, Since: at(0), Until: at(60)}, []int{0}},
	{"empty range", store.Filter{Since: at(50), Until: at(50)}, nil},
}

func TestListDeadLettersFilter(t *testing.T) {
	for _, tt := range filterTests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, s *store.Store) {
				ids := fill(t, s)
				entries, next, err := s.ListDeadLetters(tt.filter, "", 0)
				require.NoError(t, err)
				assert.Empty(t, next)
				assert.Equal(t, pick(ids, tt.want), idsOf(entries))
			})
		})
	}
}

func TestPurgeDeadLetters(t *testing.T) {
	for _, tt := range filterTests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, s *store.Store) {
				ids := fill(t, s)
				n, err := s.PurgeDeadLetters(tt.filter)
				require.NoError(t, err)
				assert.Equal(t, len(tt.want), n)

				left, _, err := s.ListDeadLetters(store.Filter{}, "", 0)
				require.NoError(t, err)
				var kept []int
				for i := range ids {
					if !slices.Contains(tt.want, i) {
						kept = append(kept, i)
					}
				}
				assert.Equal(t, pick(ids, kept), idsOf(left))
				assertCounts(t, s, 0, len(kept))
			})
		})
	}
}

func TestFilterRejects(t *testing.T) {
	tests := []struct {
		name   string
		filter store.Filter
		cursor string
		want   string
	}{
		{"bad pattern", store.Filter{Topic: "a b"}, "", "topic:"},
		{"unknown reason", store.Filter{Reason: "lost"}, "", `reason "lost"`},
		{"bad cursor", store.Filter{}, "page-2", `cursor "page-2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, s *store.Store) {
				fill(t, s)
				_, _, err := s.ListDeadLetters(tt.filter, tt.cursor, 10)
				assert.ErrorIs(t, err, store.ErrInvalid)
				assert.ErrorContains(t, err, tt.want)
				if tt.cursor == "" {
					_, err = s.PurgeDeadLetters(tt.filter)
					assert.ErrorIs(t, err, store.ErrInvalid)
					assertCounts(t, s, 0, 6) // a rejected purge removes nothing
				}
			})
		})
	}
}

func TestListDeadLettersPages(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		var ids, thirds []string
		for i := range 250 {
			topic := "agent:alice"
			if i%3 == 0 {
				topic = "orders.created"
			}
			id, err := s.DeadLetter("", deadLetter(i, topic, protocol.ReasonMaxRetries, at(i)))
			require.NoError(t, err)
			ids = append(ids, id)
			if i%3 == 0 {
				thirds = append(thirds, id)
			}
		}
		assert.IsIncreasing(t, ids, "ids sort in the order they were assigned")

		// walk lists every page and returns the ids and the page sizes.
		walk := func(f store.Filter, limit int) (got []string, sizes []int) {
			cursor := ""
			for {
				entries, next, err := s.ListDeadLetters(f, cursor, limit)
				require.NoError(t, err)
				got = append(got, idsOf(entries)...)
				sizes = append(sizes, len(entries))
				if next == "" {
					return got, sizes
				}
				require.Less(t, len(sizes), 100, "pagination does not end")
				cursor = next
			}
		}

		got, sizes := walk(store.Filter{}, 100)
		assert.Equal(t, ids, got)
		assert.Equal(t, []int{100, 100, 50}, sizes)

		got, sizes = walk(store.Filter{}, 0)
		assert.Equal(t, ids, got)
		assert.Equal(t, []int{100, 100, 50}, sizes, "limit <= 0 means DefaultListLimit")

		got, sizes = walk(store.Filter{}, 125)
		assert.Equal(t, ids, got)
		assert.Equal(t, []int{125, 125}, sizes, "an exact fit ends without an empty page")

		got, sizes = walk(store.Filter{Topic: "orders.*"}, 40)
		assert.Equal(t, thirds, got)
		assert.Equal(t, []int{40, 40, 4}, sizes)

		// A cursor survives the removal of the entry it points at.
		page, next, err := s.ListDeadLetters(store.Filter{}, "", 100)
		require.NoError(t, err)
		require.Equal(t, ids[100], next)
		require.NoError(t, s.RemoveDeadLetter(next))
		page, next, err = s.ListDeadLetters(store.Filter{}, next, 100)
		require.NoError(t, err)
		assert.Equal(t, ids[101:201], idsOf(page))
		assert.Equal(t, ids[201], next)
	})
}

func TestRemoveDeadLetter(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		ids := fill(t, s)
		require.NoError(t, s.RemoveDeadLetter(ids[2]))
		_, err := s.GetDeadLetter(ids[2])
		assert.ErrorIs(t, err, store.ErrNotFound)

		err = s.RemoveDeadLetter(ids[2])
		assert.ErrorIs(t, err, store.ErrNotFound)
		assert.EqualError(t, err, "remove dead letter "+ids[2]+": not found")
		assert.ErrorIs(t, s.RemoveDeadLetter("bogus"), store.ErrInvalid)

		assertCounts(t, s, 0, 5)
	})
}

func TestRequeue(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		ids := fill(t, s)
		d, err := s.GetDeadLetter(ids[0])
		require.NoError(t, err)
		p := &store.Pending{
			Kind:         store.KindRetry,
			Message:      d.Message,
			ClientID:     d.ClientID,
			Subscription: d.Subscription,
			NextAt:       at(100),
		}
		require.NoError(t, s.Requeue(ids[0], p))
		assert.Equal(t, "p-000000000001", p.ID)

		_, err = s.GetDeadLetter(ids[0])
		assert.ErrorIs(t, err, store.ErrNotFound, "the dead letter left")
		all, err := s.Pending()
		require.NoError(t, err)
		assert.Equal(t, []*store.Pending{p}, all, "in the same commit as the pending entry arrived")

		// A missing dead letter: nothing is stored.
		again := hold(9, at(1))
		err = s.Requeue(ids[0], again)
		assert.ErrorIs(t, err, store.ErrNotFound)
		assert.EqualError(t, err, "requeue dead letter "+ids[0]+": not found")
		assert.Empty(t, again.ID)

		// An invalid pending entry: the dead letter stays.
		err = s.Requeue(ids[1], &store.Pending{Kind: "soon"})
		assert.ErrorIs(t, err, store.ErrInvalid)
		_, err = s.GetDeadLetter(ids[1])
		require.NoError(t, err, "a failed requeue keeps the dead letter")

		assertCounts(t, s, 1, 5)
	})
}

func TestCorruptRecords(t *testing.T) {
	values := []struct {
		name  string
		value string
		want  string
	}{
		{"garbage", "\x00\xffnot json%.0s", "not valid JSON at byte 1 of 10"},
		{"truncated", `{"v":1,"id":"%[1]s","reason":"rej`, "not valid JSON at byte 42 of 42"},
		{"no version", `{"id":"%[1]s","reason":"rejected"}`, "record has no version"},
		{"newer version", `{"v":3,"id":"%[1]s","reason":"rejected"}`, "record version 3 is newer"},
		{"version 2 without a checksum", `{"v":2,"id":"%[1]s","reason":"rejected"}`, "record of version 2 has no checksum, or a damaged one"},
		{"checksum mismatch", `{"v":2,"id":"%[1]s","reason":"rejected","crc32c":"0badf00d"}`, "the record fails its CRC-32C checksum"},
		{"checksum not hex", `{"v":2,"id":"%[1]s","reason":"rejected","crc32c":"0badf00z"}`, "record of version 2 has no checksum, or a damaged one"},
		{"wrong id", `{"v":1,"id":"d-000000000009","reason":"rejected"}%.0s`, `record has id "d-000000000009"`},
		{"unknown reason", `{"v":1,"id":"%[1]s","reason":"???"}`, `reason "???"`},
		{"wrong type", `{"v":1,"id":"%[1]s","reason":"rejected","attempts":"many"}`, "cannot unmarshal"},
		{"null", `null%.0s`, "record has no version"},
	}
	for _, tt := range values {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, s *store.Store) {
				ids := fill(t, s)
				value := []byte(fmt.Sprintf(tt.value, ids[3]))
				require.NoError(t, store.PutRaw(s, ids[3], value))
				prefix := "decode deadletters record " + ids[3] + ": "

				_, err := s.GetDeadLetter(ids[3])
				assert.ErrorContains(t, err, prefix)
				assert.ErrorContains(t, err, tt.want)
				assert.ErrorIs(t, err, store.ErrDamaged)
				_, err = s.GetDeadLetter(ids[2])
				assert.NoError(t, err, "its neighbours still read")

				_, _, err = s.ListDeadLetters(store.Filter{}, "", 0)
				assert.ErrorContains(t, err, "list dead letters: "+prefix)
				_, err = s.PurgeDeadLetters(store.Filter{Reason: protocol.ReasonRejected})
				assert.ErrorContains(t, err, "purge dead letters: "+prefix)

				// An operator can still remove it, or purge everything.
				require.NoError(t, s.RemoveDeadLetter(ids[3]))
				require.NoError(t, store.PutRaw(s, ids[4], value))
				n, err := s.PurgeDeadLetters(store.Filter{})
				require.NoError(t, err)
				assert.Equal(t, 5, n)
			})
		})
	}
}

func TestCorruptPending(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		require.NoError(t, s.PutPending(hold(1, at(1))))
		require.NoError(t, store.PutRaw(s, "p-2", []byte(`{"v":1,"id":"p-000000000002","kind":"maybe"}`)))
		_, err := s.Pending()
		assert.ErrorContains(t, err, `list pending: decode pending record p-000000000002: damaged record: invalid argument: kind "maybe"`)
		require.NoError(t, s.DeletePending("p-2"))
		all, err := s.Pending()
		require.NoError(t, err)
		assert.Len(t, all, 1)
	})
}

func TestClosed(t *testing.T) {
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			s := impl.open(t)
			require.NoError(t, s.PutPending(hold(1, at(1))))
			require.NoError(t, s.Close())

			calls := map[string]func() error{
				"PutPending":    func() error { return s.PutPending(hold(2, at(2))) },
				"DeletePending": func() error { return s.DeletePending("p-1") },
				"Pending":       func() error { _, err := s.Pending(); return err },
				"CountPending":  func() error { _, err := s.CountPending(); return err },
				"DeadLetter": func() error {
					_, err := s.DeadLetter("p-1", deadLetter(1, "t", protocol.ReasonRejected, at(1)))
					return err
				},
				"GetDeadLetter":    func() error { _, err := s.GetDeadLetter("d-1"); return err },
				"ListDeadLetters":  func() error { _, _, err := s.ListDeadLetters(store.Filter{}, "", 0); return err },
				"RemoveDeadLetter": func() error { return s.RemoveDeadLetter("d-1") },
				"Requeue":          func() error { return s.Requeue("d-1", hold(3, at(3))) },
				"PurgeDeadLetters": func() error { _, err := s.PurgeDeadLetters(store.Filter{}); return err },
				"CountDeadLetters": func() error { _, err := s.CountDeadLetters(); return err },
			}
			for name, call := range calls {
				assert.ErrorIs(t, call(), store.ErrClosed, name)
			}
			// implementations' cleanup closes it a second time.
		})
	}
}

func TestConcurrentWriters(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *store.Store) {
		const writers, each = 8, 10
		ids := make(chan string, writers*each)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					p := retry(w*each+i, at(i))
					if !assert.NoError(t, s.PutPending(p)) {
						return
					}
					id, err := s.DeadLetter(p.ID, deadLetter(i, "t", protocol.ReasonMaxRetries, at(i)))
					if !assert.NoError(t, err) {
						return
					}
					ids <- id
					_, _, err = s.ListDeadLetters(store.Filter{}, "", 5)
					assert.NoError(t, err)
				}
			})
		}
		wg.Wait()
		close(ids)
		seen := map[string]bool{}
		for id := range ids {
			assert.False(t, seen[id], "id %s handed out twice", id)
			seen[id] = true
		}
		assert.Len(t, seen, writers*each)
		assertCounts(t, s, 0, writers*each)
	})
}

// assertCounts checks CountPending and CountDeadLetters.
func assertCounts(t *testing.T, s *store.Store, pending, dead int) {
	t.Helper()
	n, err := s.CountPending()
	require.NoError(t, err)
	assert.Equal(t, pending, n, "CountPending")
	n, err = s.CountDeadLetters()
	require.NoError(t, err)
	assert.Equal(t, dead, n, "CountDeadLetters")
}

func idsOf(entries []*store.DeadLetter) []string {
	var ids []string
	for _, d := range entries {
		ids = append(ids, d.ID)
	}
	return ids
}

func pick(ids []string, indexes []int) []string {
	var picked []string
	for _, i := range indexes {
		picked = append(picked, ids[i])
	}
	return picked
}
