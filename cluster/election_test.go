package cluster_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/cluster"
)

// outage is how long TestOrderWritesRideElections leaves the order with
// no stream to answer: more than the half second the client library's
// own retries last, well under the ten seconds a write of the order
// waits.
const outage = time.Second

// TestOrderWritesRideElections: while nobody answers for BUB_SUBS (as
// while its stream elects a leader, after a node's death), a durable
// subscription written anew or over the revision it read, a
// connection's subscription and a removal each wait until it answers
// again, instead of failing with "no response from stream".
func TestOrderWritesRideElections(t *testing.T) {
	n := startSolo(t, t.TempDir(), nil)
	ctx := t.Context()
	_, rev, err := n.PutDurableSubscription(ctx, cluster.Subscription{Pattern: "ride:*", ClientID: "rider"}, 0)
	require.NoError(t, err)

	errs := duringOutage(t, n, cluster.BucketSubs,
		func() error {
			_, _, err := n.PutDurableSubscription(ctx, cluster.Subscription{Pattern: "ride:x", ClientID: "rider2"}, 0)
			return err
		},
		func() error {
			_, err := n.PutSubscription(ctx, cluster.Subscription{Conn: 2, Pattern: "ride:y", ClientID: "rider3"})
			return err
		},
		func() error {
			_, err := n.DeleteSubscription(ctx, 2, "ride:z")
			return err
		},
		func() error {
			// Over a revision the bucket made again does not hold.
			_, _, err := n.PutDurableSubscription(ctx, cluster.Subscription{Pattern: "ride:*", ClientID: "rider"}, rev)
			return err
		},
	)
	for i, err := range errs[:3] {
		require.NoError(t, err, "write %d", i)
	}
	require.ErrorIs(t, errs[3], cluster.ErrRevisionChanged, "a write over a revision, once the election is over")
}

// duringOutage runs writes while n's bucket has no stream for the
// outage, and returns their errors once it is back. None may return
// during the outage.
func duringOutage(t *testing.T, n *cluster.Node, bucket string, writes ...func() error) []error {
	t.Helper()
	require.NoError(t, cluster.DropBucket(t.Context(), n, bucket))
	type result struct {
		i   int
		err error
	}
	done := make(chan result, len(writes))
	for i, write := range writes {
		go func() { done <- result{i, write()} }()
	}
	select {
	case r := <-done:
		t.Fatalf("write %d returned while nobody answered: %v", r.i, r.err)
	case <-time.After(outage):
	}
	require.NoError(t, cluster.RemakeBucket(t.Context(), n, bucket))
	errs := make([]error, len(writes))
	for range writes {
		r := <-done
		errs[r.i] = r.err
	}
	return errs
}

// TestIdempotencyReservationRidesElections: the first reservation of an
// idempotency key, and an answer recorded without one, wait while
// nobody answers for BUB_IDEMPOTENCY instead of failing, as the node's
// other writes do; a key recorded already is still refused.
func TestIdempotencyReservationRidesElections(t *testing.T) {
	st := startSolo(t, t.TempDir(), nil).Store()
	now := time.Now()
	answer := func(a string) *store.Idempotent {
		return &store.Idempotent{BodyHash: []byte("sum"), Answer: json.RawMessage(a), Expires: now.Add(time.Hour)}
	}
	errs := duringOutage(t, st.Node(), cluster.BucketIdempotency,
		func() error {
			got, err := st.ReserveIdempotent("alice", "k", now)
			if err == nil && got != nil {
				err = fmt.Errorf("a new key has an answer: %s", got.Answer)
			}
			return err
		},
		func() error { return st.PutIdempotent("bob", "k", answer(`"one"`), now) },
	)
	require.NoError(t, errs[0], "reserve")
	require.NoError(t, errs[1], "record without a reservation")
	require.NoError(t, st.PutIdempotent("alice", "k", answer(`"two"`), now), "the answer to the reservation")
	got, err := st.ReserveIdempotent("alice", "k", now)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.JSONEq(t, `"two"`, string(got.Answer))
	require.Error(t, st.PutIdempotent("bob", "k", answer(`"three"`), now), "a second answer, unreserved, replaced the first")
}
