package gateway

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/bustest"
)

// readerReady reports what the gateway's state says of reader.
func readerReady(t *testing.T, g *Gateway, reader string) bool {
	t.Helper()
	var ready bool
	err := g.state.update(time.Now(), func(tx *txn) error {
		r, err := tx.reader(reader)
		ready = r != nil && r.Ready
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ready
}

// A Reader that connects after queries wait for it hears its list
// first, then the queries in the order they were made; so too after it
// went away and came back. Without the gateway's parking, the bus would
// route the queries it held the moment the Reader subscribed, before the
// gateway had heard of the subscription.
func TestReaderHearsListBeforeWaitingQueries(t *testing.T) {
	f := newFixture(t)
	g := f.gateway(nil)
	main := f.agent("main")

	first := main.query(cat1Query("researcher"))
	second := main.query(cat2Query("researcher", 5))
	researcher := f.agent("researcher")
	// The wake-up list the bus held may come first, then the one for
	// this subscription; nothing else comes before a list.
	researcher.expect(TypeSubscriptionsActive)
	for _, id := range []string{first, second} {
		if q := researcher.expectAfter(TypeSubscriptionsActive, TypeQuery); q["query_id"] != id {
			t.Fatalf("query %v, want %s (in order)", q["query_id"], id)
		}
	}
	require.Eventually(t, func() bool { return readerReady(t, g, "researcher") }, bustest.Timeout, 10*time.Millisecond, "the researcher to be ready")

	researcher.conn.Close()
	require.Eventually(t, func() bool { return !readerReady(t, g, "researcher") }, bustest.Timeout, 10*time.Millisecond, "the gateway to hear the researcher left")
	third := main.query(cat1Query("researcher"))
	back := f.agent("researcher")
	back.expect(TypeSubscriptionsActive)
	// A query whose ack was still on its way when the first connection
	// closed is delivered again (at least once), before the third.
	q := back.expectAfter(TypeSubscriptionsActive, TypeQuery)
	for q["query_id"] == second || q["query_id"] == first {
		q = back.expectAfter(TypeSubscriptionsActive, TypeQuery)
	}
	if q["query_id"] != third {
		t.Fatalf("query %v after the reconnect, want %s", q["query_id"], third)
	}
}

// A query that expires while its Reader is away is not sent to it when
// it comes: there is nothing left to answer. The Controller hears
// expired.
func TestExpiredQueryNotSentToLateReader(t *testing.T) {
	f := newFixture(t)
	g := f.gateway(func(o *Options) { o.QueryTTL = 200 * time.Millisecond })
	main := f.agent("main")
	id := main.query(cat1Query("researcher"))
	if failed := main.expect(TypeQueryFailed); failed["query_id"] != id || failed["code"] != CodeExpired {
		t.Fatalf("failure = %v", failed)
	}
	// The live query gets the default ten minutes: with 200ms it could
	// expire too on a slow machine before the Reader connects.
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	f.gateway(nil)
	fresh := main.query(cat1Query("researcher"))
	researcher := f.agent("researcher")
	researcher.expect(TypeSubscriptionsActive)
	if q := researcher.expectAfter(TypeSubscriptionsActive, TypeQuery); q["query_id"] != fresh {
		t.Fatalf("query %v, want only the live one %s", q["query_id"], fresh)
	}
}
