package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/protocol"
)

// Test timings: heartbeats fast enough that a dead node is noticed in
// well under the bounds below, on a loaded two-core box.
const (
	testHeartbeat   = 200 * time.Millisecond
	testNodeTimeout = 1500 * time.Millisecond
	// bound is how long a test waits for something that should take a
	// fraction of it: it fails only when the thing does not happen.
	bound = 30 * time.Second
)

// recorder is what one node's callbacks saw.
type recorder struct {
	mu        sync.Mutex
	changes   []cluster.SubscriptionChange
	takenOver []string // clientId/conn
	removed   []string // clientId/conn, claims another node removed
	down      []string
}

func (r *recorder) apply(c cluster.SubscriptionChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
}

// active returns the subscriptions the recorded changes leave, in the
// order the router would hold them: by revision.
func (r *recorder) active() []cluster.SubscriptionChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := map[string]cluster.SubscriptionChange{}
	for _, c := range r.changes {
		if c.Deleted {
			delete(byKey, c.Key)
		} else {
			byKey[c.Key] = c
		}
	}
	out := make([]cluster.SubscriptionChange, 0, len(byKey))
	for _, c := range byKey {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b cluster.SubscriptionChange) int { return int(a.Revision) - int(b.Revision) })
	return out
}

func (r *recorder) sawRevision(rev uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.changes, func(c cluster.SubscriptionChange) bool { return c.Revision == rev })
}

func (r *recorder) takenOverList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.takenOver)
}

func (r *recorder) removedList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.removed)
}

func (r *recorder) downList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.down)
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}

// startCluster starts one node per id, each embedding a server routed to
// all the others, concurrently (each waits for the others' quorum), and
// closes them at the end of the test. serve, if set, gives each node's
// Deliver and Survey handlers.
func startCluster(t *testing.T, ids []string, serve func(id string) cluster.Handler) ([]*cluster.Node, []*recorder) {
	t.Helper()
	nodes, recs, _ := startClusterWith(t, ids, serve, nil)
	return nodes, recs
}

// startClusterWith is startCluster with tweak, if set, changing each
// node's options before it starts; it returns the options too, with
// which a test starts a node again.
func startClusterWith(t *testing.T, ids []string, serve func(id string) cluster.Handler, tweak func(id string, o *cluster.Options)) ([]*cluster.Node, []*recorder, []*cluster.Options) {
	t.Helper()
	ports := clustertest.FreePorts(t, len(ids))
	nodes := make([]*cluster.Node, len(ids))
	recs := make([]*recorder, len(ids))
	allOpts := make([]*cluster.Options, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		rec := &recorder{}
		recs[i] = rec
		opts := &cluster.Options{
			Name:              "test",
			NodeID:            id,
			ClusterListen:     "127.0.0.1:" + strconv.Itoa(ports[i]),
			StoreDir:          t.TempDir(),
			HeartbeatInterval: testHeartbeat,
			NodeTimeout:       testNodeTimeout,
			SyncTimeout:       2 * time.Second,
			StartTimeout:      bound,
			Logger:            testLogger(),
		}
		allOpts[i] = opts
		var h cluster.Handler
		if serve != nil {
			h = serve(id)
		}
		h = rec.handler(h)
		for j, p := range ports {
			if j != i {
				opts.Routes = append(opts.Routes, "nats://127.0.0.1:"+strconv.Itoa(p))
			}
		}
		if tweak != nil {
			tweak(id, opts)
		}
		wg.Go(func() { nodes[i], errs[i] = cluster.Start(t.Context(), opts, h) })
	}
	wg.Wait()
	t.Cleanup(func() {
		// Concurrently: a node closed after the others finds no quorum
		// for its clean-up writes and waits out its ctx.
		var wg sync.WaitGroup
		for _, n := range nodes {
			if n != nil {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					_ = n.Close(ctx)
				})
			}
		}
		wg.Wait()
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return nodes, recs, allOpts
}

// handler returns h, with Deliver and Survey as they are, recording
// what the node's other callbacks hear.
func (r *recorder) handler(h cluster.Handler) cluster.Handler {
	return cluster.Handler{
		Deliver:           h.Deliver,
		Survey:            h.Survey,
		ApplySubscription: r.apply,
		TakenOver: func(clientID string, conn uint64) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.takenOver = append(r.takenOver, fmt.Sprintf("%s/%d", clientID, conn))
		},
		ClaimRemoved: func(clientID string, conn uint64) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.removed = append(r.removed, fmt.Sprintf("%s/%d", clientID, conn))
		},
		NodeDown: func(node string, acting bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.down = append(r.down, node)
		},
	}
}

// echo is a Deliver handler that answers with what it got, or fails,
// hangs, takes slowTurn, or says the milliseconds left until its
// deadline, on request.
func echo(node string) func(context.Context, *cluster.Delivery) ([]byte, error) {
	return func(ctx context.Context, d *cluster.Delivery) ([]byte, error) {
		switch string(d.Payload) {
		case "fail":
			return nil, errors.New("subscriber said no")
		case "hang":
			<-ctx.Done()
			return nil, ctx.Err()
		case "slow":
			time.Sleep(slowTurn) // the behaviour under test: a slow subscriber
		case "time left":
			return strconv.AppendInt(nil, time.Until(d.Deadline).Milliseconds(), 10), nil
		}
		return fmt.Appendf(nil, "%s got %s/%d/%s/%d: %s", node, d.ClientID, d.Conn, d.Pattern, d.Attempt, d.Payload), nil
	}
}

// searched is a Survey handler that answers with its operation and what
// it was asked, or fails or hangs on request.
func searched(node string) func(context.Context, string, []byte) ([]byte, error) {
	return func(ctx context.Context, op string, req []byte) ([]byte, error) {
		switch string(req) {
		case "fail":
			return nil, errors.New("no such page")
		case "hang":
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return fmt.Appendf(nil, "%s %s %s", node, op, req), nil
	}
}

// slowTurn is how long echo takes over a "slow" request.
const slowTurn = 500 * time.Millisecond

// TestCluster runs three nodes in one process, with an embedded NATS
// cluster on loopback, through the primitives in turn; starting a
// JetStream cluster costs seconds, so the subtests share one. The last
// subtest kills a node.
func TestCluster(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes, recs := startCluster(t, ids, func(id string) cluster.Handler {
		return cluster.Handler{Deliver: echo(id), Survey: searched(id)}
	})
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx := t.Context()

	t.Run("live", func(t *testing.T) {
		for _, n := range nodes {
			require.Eventually(t, func() bool { return slices.Equal(n.Live(), ids) }, bound, 20*time.Millisecond, n.ID()+" sees all three live")
			if n.Replicas() != 3 {
				t.Errorf("%s: replicas %d, want 3", n.ID(), n.Replicas())
			}
		}
		if !a.Acting() || b.Acting() || c.Acting() {
			t.Errorf("acting: a %v b %v c %v; want only a, the lowest id", a.Acting(), b.Acting(), c.Acting())
		}
	})

	t.Run("one order", func(t *testing.T) {
		// The spec's last-match-wins example, spread over the nodes,
		// with a duplicate pattern on another node.
		puts := []struct {
			node    *cluster.Node
			conn    uint64
			pattern string
		}{
			{a, 1, "*"},
			{b, 1, "order:*"},
			{c, 1, "order:created"},
			{a, 2, "order:*"},
			{b, 2, "*"},
		}
		for _, p := range puts {
			rev, err := p.node.PutSubscription(ctx, cluster.Subscription{
				Conn: p.conn, Pattern: p.pattern, Policy: protocol.PolicyContinueAll,
				ClientID: p.node.ID() + strconv.Itoa(int(p.conn)),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.node.Sync(ctx, rev); err != nil {
				t.Fatal(err)
			}
		}
		want := recs[0].active()
		if len(want) != len(puts) {
			t.Fatalf("node a holds %d subscriptions, want %d: %+v", len(want), len(puts), want)
		}
		for i, p := range puts {
			s := want[i].Subscription
			if s.Node != p.node.ID() || s.Conn != p.conn || s.Pattern != p.pattern {
				t.Errorf("place %d: %s/%d %q, want %s/%d %q", i, s.Node, s.Conn, s.Pattern, p.node.ID(), p.conn, p.pattern)
			}
		}
		for i, r := range recs[1:] {
			if got := r.active(); !slices.EqualFunc(got, want, func(x, y cluster.SubscriptionChange) bool {
				return x.Key == y.Key && x.Revision == y.Revision && x.Subscription == y.Subscription
			}) {
				t.Errorf("node %s's order differs from a's:\n got %+v\nwant %+v", ids[i+1], got, want)
			}
		}
	})

	t.Run("sync is read your writes", func(t *testing.T) {
		for range 5 {
			rev, err := a.PutSubscription(ctx, cluster.Subscription{Conn: 7, Pattern: "sync:*", ClientID: "s"})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Sync(ctx, rev); err != nil {
				t.Fatal(err)
			}
			// No waiting here: Sync returned, so every node applied it.
			for i, r := range recs {
				if !r.sawRevision(rev) {
					t.Fatalf("Sync(%d) returned on a before node %s applied it", rev, ids[i])
				}
			}
			del, err := a.DeleteSubscription(ctx, 7, "sync:*")
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Sync(ctx, del); err != nil {
				t.Fatal(err)
			}
			for i, r := range recs {
				if !r.sawRevision(del) {
					t.Fatalf("Sync(%d) of a delete returned before node %s applied it", del, ids[i])
				}
			}
		}
		if n := a.SyncTimeouts(); n != 0 {
			t.Errorf("%d sync timeouts with every node up", n)
		}
	})

	t.Run("takeover", func(t *testing.T) {
		if _, err := a.ClaimClient(ctx, "agent:one", 11); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ClaimClient(ctx, "agent:one", 21); err != nil {
			t.Fatal(err)
		}
		require.Eventually(t, func() bool {
			return slices.Equal(recs[0].takenOverList(), []string{"agent:one/11"})
		}, bound, 20*time.Millisecond, "a hears agent:one taken over from conn 11")

		// Two claims racing: the later revision wins, the other hears it.
		var revA, revC uint64
		var errA, errC error
		var wg sync.WaitGroup
		wg.Go(func() { revA, errA = a.ClaimClient(ctx, "agent:race", 12) })
		wg.Go(func() { revC, errC = c.ClaimClient(ctx, "agent:race", 32) })
		wg.Wait()
		loser, loserRec, loserConn, loserErr := a, recs[0], "agent:race/12", errA
		if revA > revC {
			loser, loserRec, loserConn, loserErr = c, recs[2], "agent:race/32", errC
		}
		if loserErr == nil {
			require.Eventually(t, func() bool {
				return slices.Contains(loserRec.takenOverList(), loserConn)
			}, bound, 20*time.Millisecond, loser.ID()+" hears it lost agent:race")
		} else if !errors.Is(loserErr, cluster.ErrTakenOver) {
			t.Fatal(loserErr)
		}
		if slices.ContainsFunc(append(recs[0].takenOverList(), recs[2].takenOverList()...), func(s string) bool {
			return s != loserConn && s != "agent:one/11"
		}) {
			t.Errorf("the winner of the race heard a takeover: a %v, c %v", recs[0].takenOverList(), recs[2].takenOverList())
		}

		// Releasing a claim another connection took is a no-op.
		if err := a.ReleaseClient(ctx, "agent:one", 11); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("deliver", func(t *testing.T) {
		d := &cluster.Delivery{ClientID: "agent:one", Conn: 21, Pattern: "order:*", Attempt: 2, Payload: []byte(`{"raw":true}`)}
		got, err := a.Deliver(ctx, "b", d)
		if err != nil {
			t.Fatal(err)
		}
		if want := []byte(`b got agent:one/21/order:*/2: {"raw":true}`); !bytes.Equal(got, want) {
			t.Errorf("got %q, want %q", got, want)
		}

		_, err = a.Deliver(ctx, "zz", d)
		if !errors.Is(err, cluster.ErrNodeGone) {
			t.Errorf("to a node that does not exist: %v, want ErrNodeGone", err)
		}

		d.Payload = []byte("fail")
		_, err = c.Deliver(ctx, "a", d)
		if !errors.Is(err, cluster.ErrDeliveryFailed) || !bytes.Contains([]byte(err.Error()), []byte("subscriber said no")) {
			t.Errorf("handler error: %v, want ErrDeliveryFailed with its text", err)
		}

		d.Payload = []byte("hang")
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = a.Deliver(short, "c", d)
		cancel()
		if !errors.Is(err, cluster.ErrDeliveryTimeout) {
			t.Errorf("handler that never answers: %v, want ErrDeliveryTimeout", err)
		}
	})

	t.Run("survey", func(t *testing.T) {
		// Asked and answered as a delivery is.
		got, err := a.Survey(ctx, "b", "journal", []byte("page 1"))
		if err != nil || string(got) != "b journal page 1" {
			t.Errorf("journal survey of b: %q, %v", got, err)
		}
		if got, err := a.Survey(ctx, "b", "other-op", []byte("x")); err != nil || string(got) != "b other-op x" {
			t.Errorf("another operation of b: %q, %v", got, err)
		}
		if _, err := a.Survey(ctx, "zz", "journal", []byte("page 1")); !errors.Is(err, cluster.ErrNodeGone) {
			t.Errorf("of a node that does not exist: %v, want ErrNodeGone", err)
		}
		if _, err := a.Survey(ctx, "a.b", "journal", []byte("page 1")); err == nil || !strings.Contains(err.Error(), "not a node id") {
			t.Errorf("of a malformed node id: %v", err)
		}
		if _, err := a.Survey(ctx, "b", "a.*", []byte("page 1")); err == nil || !strings.Contains(err.Error(), "not an operation name") {
			t.Errorf("of a malformed operation: %v", err)
		}
		_, err = c.Survey(ctx, "a", "journal", []byte("fail"))
		if !errors.Is(err, cluster.ErrSurveyFailed) || !strings.Contains(err.Error(), "no such page") {
			t.Errorf("handler error: %v, want ErrSurveyFailed with its text", err)
		}
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = a.Survey(short, "c", "journal", []byte("hang"))
		cancel()
		if !errors.Is(err, cluster.ErrDeliveryTimeout) {
			t.Errorf("handler that never answers: %v, want ErrDeliveryTimeout", err)
		}
	})

	t.Run("deadline counts the queue", func(t *testing.T) {
		// A request queued on b behind a slow one for the same
		// connection has its time counted from its arrival, as a's
		// clock counts it, not from when its turn comes.
		sent := make(chan struct{})
		slow := &cluster.Delivery{ClientID: "q", Conn: 31, Pattern: "*", Attempt: 1, Payload: []byte("slow"), Sent: func() { close(sent) }}
		go func() { _, _ = a.Deliver(ctx, "b", slow) }()
		<-sent
		const timeout = 3 * time.Second
		d := &cluster.Delivery{ClientID: "q", Conn: 31, Pattern: "*", Attempt: 1, Payload: []byte("time left"), Deadline: time.Now().Add(timeout)}
		got, err := a.Deliver(ctx, "b", d)
		if err != nil {
			t.Fatal(err)
		}
		left, err := strconv.Atoi(string(got))
		if err != nil {
			t.Fatalf("answer %q: %v", got, err)
		}
		if max := (timeout - slowTurn).Milliseconds(); left > int(max) || left <= 0 {
			t.Errorf("%d ms left when its turn came after a %v queue, want 0 < left <= %d", left, slowTurn, max)
		}
	})

	t.Run("node death", func(t *testing.T) {
		rev, err := c.PutSubscription(ctx, cluster.Subscription{Conn: 3, Pattern: "dies:*", ClientID: "doomed"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(ctx, rev); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ClaimClient(ctx, "doomed", 3); err != nil {
			t.Fatal(err)
		}
		held := func(r *recorder) bool {
			return slices.ContainsFunc(r.active(), func(s cluster.SubscriptionChange) bool { return s.Subscription.Node == "c" })
		}
		if !held(recs[0]) || !held(recs[1]) {
			t.Fatal("c's subscriptions are not in the order before it dies")
		}

		c.Crash()
		killed := time.Now()

		for i, r := range recs[:2] {
			require.Eventually(t, func() bool { return slices.Equal(r.downList(), []string{"c"}) }, bound, 20*time.Millisecond, ids[i]+" hears c is down")
			require.Eventually(t, func() bool { return !held(r) }, bound, 20*time.Millisecond, ids[i]+" drops c's subscriptions")
		}
		t.Logf("c's subscriptions left the order %v after it died (node timeout %v)", time.Since(killed).Round(10*time.Millisecond), testNodeTimeout)
		for _, n := range nodes[:2] {
			if live := n.Live(); !slices.Equal(live, []string{"a", "b"}) {
				t.Errorf("%s: live %v after c died", n.ID(), live)
			}
		}
		// Its claim went too: a new claim on b takes nothing from anyone.
		if _, err := b.ClaimClient(ctx, "doomed", 22); err != nil {
			t.Fatal(err)
		}

		// The two survivors still make a quorum and answer each other.
		rev, err = b.PutSubscription(ctx, cluster.Subscription{Conn: 8, Pattern: "after:*", ClientID: "late"})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Sync(ctx, rev); err != nil {
			t.Fatal(err)
		}
		if !recs[0].sawRevision(rev) {
			t.Error("a did not apply b's subscription before b's Sync returned")
		}
		if _, err := a.Deliver(ctx, "c", &cluster.Delivery{Payload: []byte("x")}); !errors.Is(err, cluster.ErrNodeGone) {
			t.Errorf("deliver to the dead node: %v, want ErrNodeGone", err)
		}
	})
}
