package journal

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/protocol"
)

// testJournal is a journal of its own registry, its cursors' boot
// "b00t" (as the fuzzers' seeds name it).
func testJournal(o Options) *journal {
	j := newJournal(o, "", prometheus.NewRegistry())
	j.boot = "b00t"
	return j
}

func recordN(j *journal, n int) {
	for i := range n {
		j.record(&protocol.JournalEvent{Kind: protocol.JournalAccepted, MessageID: "m" + strconv.Itoa(i), Topic: "jobs:a"})
	}
}

// TestJournalRetentionByAge checks that blocks whose events are all past
// the age are dropped, oldest first, and counted, and that a reader never
// sees an event past the age even before its block is dropped.
func TestJournalRetentionByAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := testJournal(Options{MaxAge: time.Minute})
		recordN(j, 3*journalBlockSize)
		time.Sleep(2 * time.Minute) // the bubble's fake time passes the age

		page, _, _, _ := j.read(0, maxEventsLimit, &journalQuery{})
		require.Empty(t, page, "past the age, though still held")

		recordN(j, 1)
		require.Equal(t, float64(3*journalBlockSize), testutil.ToFloat64(j.dropped.WithLabelValues("age")))
		require.Equal(t, float64(1), testutil.ToFloat64(j.retained))
		page, _, _, gap := j.read(1, maxEventsLimit, &journalQuery{})
		require.True(t, gap, "events after cursor 1 were dropped")
		require.Len(t, page, 1)
		require.Equal(t, j.cursor(3*journalBlockSize+1), page[0].Cursor)
	})
}

// TestJournalRetentionByBytes checks that the journal stays within its
// bytes, dropping the oldest blocks and counting their events, and that
// a reader behind them is told of the gap and goes on from the oldest
// event kept.
func TestJournalRetentionByBytes(t *testing.T) {
	per := eventBytes(&protocol.JournalEvent{MessageID: "m000", Topic: "jobs:a"})
	j := testJournal(Options{MaxBytes: 2 * journalBlockSize * per})
	recordN(j, 10*journalBlockSize)
	require.LessOrEqual(t, j.bytes, j.opts.MaxBytes)
	dropped := testutil.ToFloat64(j.dropped.WithLabelValues("bytes"))
	require.Positive(t, dropped)
	require.Equal(t, float64(10*journalBlockSize)-dropped, testutil.ToFloat64(j.retained))
	page, last, more, gap := j.read(5, 10, &journalQuery{})
	require.True(t, gap)
	require.True(t, more)
	require.Equal(t, j.cursor(uint64(dropped)+1), page[0].Cursor, "the oldest kept")
	require.Equal(t, uint64(dropped)+10, last)
}

// TestJournalConcurrentReadersSeeEveryEventOnce records from several
// goroutines while readers page through: each reader sees every event,
// once, in order (run it with -race).
func TestJournalConcurrentReadersSeeEveryEventOnce(t *testing.T) {
	j := testJournal(Options{})
	const writers, each = 4, 2000
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() { recordN(j, each) })
	}
	for range 2 {
		wg.Go(func() {
			var after uint64
			for after < writers*each {
				page, last, _, _ := j.read(after, 97, &journalQuery{})
				for i, ev := range page {
					if ev.Cursor != j.cursor(after+uint64(i)+1) {
						t.Errorf("event %s after %d; want %s", ev.Cursor, after, j.cursor(after+uint64(i)+1))
						return
					}
				}
				after = last
				if len(page) == 0 {
					if wake := j.waitFor(after); wake != nil {
						<-wake
					}
				}
			}
		})
	}
	wg.Wait()
}

// deliveryEvent is the event the core tells its observers of one
// delivery attempt.
var deliveryEvent = bus.Event{JournalEvent: protocol.JournalEvent{Kind: protocol.JournalDelivery,
	MessageID: "0a1b2c3d4e5f-12345", Topic: "jobs:a", ClientID: "worker", Subscription: "jobs:*", Attempt: 1, Outcome: "processed"}}

// TestJournalRecordAllocatesOnlyBlocks checks that recording a delivery
// allocates nothing per event but its block, once per journalBlockSize.
func TestJournalRecordAllocatesOnlyBlocks(t *testing.T) {
	j := testJournal(Options{})
	allocs := testing.AllocsPerRun(10*journalBlockSize, func() { j.Observe(deliveryEvent) })
	require.Less(t, allocs, 1.0)
}

// BenchmarkJournalRecord measures the record path of one delivery. The
// B/op is the blocks' (one per journalBlockSize events), and the time
// includes the collector's scan of the retained journal, which a real
// bus pays too. The core's side, with and without observers, is
// bus's BenchmarkObserve.
func BenchmarkJournalRecord(b *testing.B) {
	j := testJournal(Options{})
	b.ReportAllocs()
	for b.Loop() {
		j.Observe(deliveryEvent)
	}
}

// FuzzJournalQuery feeds query strings to the journal's parser: it never
// panics, refuses with an error rather than guessing, and a cursor it
// gave reads back as the event it names.
func FuzzJournalQuery(f *testing.F) {
	for _, seed := range []string{
		"correlationId=b00t-1&topic=jobs:*&since=15m&after=b00t.3&limit=10",
		"since=2026-01-02T15:04:05Z", "after=other.99", "after=b00t.99999999999999999999", "after=.1", "after=b00t.",
		"topic=a%20b", "limit=-1", "limit=1&limit=2", "x=1", "since=-1h", "topic=[a-", "correlationId=",
		"messageId=b00t-7&kind=delivery", "kind=nope", "since=1h&until=30m", "since=30m&until=1h", "until=2026-01-02T15:04:05Z", "messageId=",
	} {
		f.Add(seed)
	}
	j := testJournal(Options{})
	recordN(j, 10)
	now := time.Now()
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		req, err := j.parseEventsQuery(v, now)
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		require.LessOrEqual(t, req.after, uint64(10), "a cursor past the newest event is refused")
		require.True(t, req.limit >= 1 && req.limit <= maxEventsLimit)
		require.True(t, req.q.until.IsZero() || !req.q.until.Before(req.q.since), "until before since is refused")
		require.True(t, req.q.kind == "" || slices.Contains(journalKinds, req.q.kind), "an unknown kind is refused")
		page, last, _, _ := j.read(req.after, req.limit, &req.q)
		require.GreaterOrEqual(t, last, req.after)
		for _, ev := range page {
			seq, err := j.parseCursor(ev.Cursor)
			require.NoError(t, err)
			require.Greater(t, seq, req.after)
		}
	})
}

// The Messages page's searches on a full journal: the default 64 MiB
// holds about 160,000 events, and a search by message id, by kind or by
// topic reads them all once per page. The time is logged for
// docs/OPERATIONS.md; the test asserts what is found.
func TestJournalSearchFullJournal(t *testing.T) {
	n := 160_000
	if testing.Short() {
		n = 20_000
	}
	j := testJournal(Options{})
	recordN(j, n)
	mid := "m" + strconv.Itoa(n/2)
	v, err := url.ParseQuery("messageId=" + mid + "&limit=1000")
	require.NoError(t, err)
	req, err := j.parseEventsQuery(v, time.Now())
	require.NoError(t, err)
	start := time.Now()
	page, _, more, _ := j.read(req.after, req.limit, &req.q)
	took := time.Since(start)
	require.Len(t, page, 1)
	require.Equal(t, mid, page[0].MessageID)
	require.False(t, more)
	t.Logf("a message's timeline from %d events: %v", n, took)

	v, err = url.ParseQuery("topic=jobs:*&kind=accepted&limit=100")
	require.NoError(t, err)
	req, err = j.parseEventsQuery(v, time.Now())
	require.NoError(t, err)
	start = time.Now()
	page, _, more, _ = j.read(req.after, req.limit, &req.q)
	require.Len(t, page, 100)
	require.True(t, more)
	t.Logf("a page of 100 by topic and kind from %d events: %v", n, time.Since(start))
}

// FuzzNodeCursors feeds cursors to the parser of a cluster's page
// cursor: it never panics, refuses with an error, and what it reads
// writes back as a cursor that reads the same.
func FuzzNodeCursors(f *testing.F) {
	for _, seed := range []string{
		"", "b00t.3", "a:b00t.3,b:f00d.0", "a:b00t.3,a:b00t.4", "a:b00t.3,", ":b00t.3", "a b:x.1", "a:x.y",
		"a:b:c.1", "a:.1", "a:x.1,b", "a:x.99999999999999999999", "n-1_2:x.1", "b00t.", ".1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, c string) {
		m, err := parseNodeCursors(c)
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		require.LessOrEqual(t, len(m), maxCursorNodes)
		for node, cur := range m {
			require.True(t, node == "" || protocol.ValidNodeID(node), "node %q", node)
			_, _, ok := splitCursor(cur)
			require.True(t, ok, "cursor %q of %q", cur, node)
		}
		again, err := parseNodeCursors(m.String())
		require.NoError(t, err, "written as %q", m.String())
		require.Equal(t, m, again)
	})
}

// TestNodeCursorsNodeIDs: a cluster's cursor names nodes by the rule
// package cluster starts them by (protocol.ValidNodeID), so that every
// node a cluster can run is one a reader can send back.
func TestNodeCursorsNodeIDs(t *testing.T) {
	for _, c := range []struct {
		node string
		ok   bool
	}{
		{"n-1_B", true},
		{strings.Repeat("n", protocol.MaxNodeIDLength), true},
		{strings.Repeat("n", protocol.MaxNodeIDLength+1), false},
		{"a.b", false},
		{"=durable", false},
	} {
		_, err := parseNodeCursors(c.node + ":b00t.3,z:b00t.4")
		require.Equal(t, c.ok, err == nil, "node %q: %v", c.node, err)
	}
}

// Events recorded at once by several goroutines, which read the clock
// before they take the journal's lock, are still in time order, every
// one of them kept, across blocks made ready outside the lock.
func TestJournalConcurrentRecordsInTimeOrder(t *testing.T) {
	const writers, each = 4, 3 * journalBlockSize
	j := testJournal(Options{})
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() { recordN(j, each) })
	}
	wg.Wait()
	page, _, more, gap := j.read(0, writers*each, &journalQuery{})
	require.False(t, more)
	require.False(t, gap)
	require.Len(t, page, writers*each)
	for i := 1; i < len(page); i++ {
		require.False(t, page[i].Time.Before(page[i-1].Time), "event %d at %v is before event %d at %v", i+1, page[i].Time, i, page[i-1].Time)
	}
}
