package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/protocol"
)

var (
	_ bus.Store = (*store.Store)(nil)
	_ bus.Store = (*cluster.Store)(nil)
)

// noHandler is the handler of a node whose subscriptions the test does
// not look at.
var noHandler = cluster.Handler{ApplySubscription: func(cluster.SubscriptionChange) {}}

// startSolo starts a node alone on an embedded server in dir, with opts
// applied, and closes it at the end of the test.
func startSolo(t *testing.T, dir string, opts func(*cluster.Options)) *cluster.Node {
	t.Helper()
	o := soloOptions(dir)
	if opts != nil {
		opts(o)
	}
	n, err := cluster.Start(t.Context(), o, noHandler)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeNode(n) })
	return n
}

func closeNode(n *cluster.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = n.Close(ctx)
}

// payload is compact JSON with what an encoder might touch: escapes,
// HTML characters, non-ASCII, a line separator.
const payload = `{"text":"<b>&amp;</b> é \u2028 \"q\" \\","n":[1,2.5e3,null,true]}`

func message(id, topic, publisher string) store.Message {
	return store.Message{
		ID: id, Topic: topic, From: publisher + "-conn", Publisher: publisher,
		Payload: []byte(payload), Meta: []byte(`{"trace":"x"}`),
		PublishedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	}
}

// outcome names an error by the store error it wraps, so that the two
// stores' results compare.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, store.ErrInvalid):
		return "invalid"
	case errors.Is(err, store.ErrNotFound):
		return "not found"
	case errors.Is(err, store.ErrNoFile):
		return "no file"
	}
	return "error: " + err.Error()
}

// semantics runs the same operations on st and describes what it saw,
// with ids named by the step that made them: the file store and the
// cluster's must describe the same.
func semantics(t *testing.T, st bus.Store) []string {
	var log []string
	say := func(format string, args ...any) { log = append(log, fmt.Sprintf(format, args...)) }
	names := map[string]string{}
	name := func(id string) string {
		if n, ok := names[id]; ok {
			return n
		}
		return "?" + id
	}
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	attempt := store.Attempt{At: base, Error: "timeout"}

	// Puts: refusals, then three entries.
	for _, c := range []struct {
		what string
		p    *store.Pending
	}{
		{"nil", nil},
		{"bad kind", &store.Pending{Kind: "later", Message: message("m0", "t", "pub")}},
		{"retry without client", &store.Pending{Kind: store.KindRetry, Message: message("m0", "t", "pub")}},
		{"hold with client", &store.Pending{Kind: store.KindHold, ClientID: "c", Message: message("m0", "t", "pub")}},
		{"payload not JSON", &store.Pending{Kind: store.KindHold, Message: store.Message{ID: "m0", Payload: []byte("{x")}}},
		{"malformed id", &store.Pending{ID: "q-1", Kind: store.KindHold, Message: message("m0", "t", "pub")}},
	} {
		say("put %s: %s", c.what, outcome(st.PutPending(c.p)))
	}
	h1 := &store.Pending{Kind: store.KindHold, Message: message("m1", "order:created", "pubA"), NextAt: base.Add(2 * time.Second), AskedBy: "fallback"}
	r1 := &store.Pending{Kind: store.KindRetry, Message: message("m2", "order:paid", "pubA"), ClientID: "agent", Subscription: "order:*",
		Attempts: []store.Attempt{attempt}, NextAt: base.Add(time.Second)}
	h2 := &store.Pending{Kind: store.KindHold, Message: message("m3", "invoice:sent", "pubB"), NextAt: base.Add(time.Second)}
	for i, p := range []*store.Pending{h1, r1, h2} {
		err := st.PutPending(p)
		names[p.ID] = []string{"h1", "r1", "h2"}[i]
		say("put %s: %s, id set %v", names[p.ID], outcome(err), p.ID != "")
	}
	schedule := func() {
		all, err := st.PendingSchedule()
		var got []string
		for _, p := range all {
			got = append(got, fmt.Sprintf("%s(%s %s attempts %d payload %d meta %d next %s asked %q)",
				name(p.ID), p.Kind, p.Message.ID, len(p.Attempts), len(p.Message.Payload), len(p.Message.Meta),
				p.NextAt.Sub(base), p.AskedBy))
		}
		say("schedule: %s %v", outcome(err), got)
	}
	counts := func() {
		total, a, err := st.PendingUsage("pubA")
		_, b, _ := st.PendingUsage("pubB")
		n, err2 := st.CountPending()
		say("counts: %s total %d pubA %d pubB %d; count %d %s", outcome(err), total.Entries, a.Entries, b.Entries, n, outcome(err2))
	}
	schedule()
	counts()

	// Load the message back, and replace an entry.
	p := &store.Pending{ID: r1.ID, Message: store.Message{ID: "m2"}}
	err := st.LoadMessage(p)
	say("load r1: %s payload %q meta %q", outcome(err), p.Message.Payload, p.Message.Meta)
	say("load r1 as another message fails: %v", outcome(st.LoadMessage(&store.Pending{ID: r1.ID, Message: store.Message{ID: "zz"}})) != "ok")
	r1.Attempts = append(r1.Attempts, store.Attempt{At: base.Add(time.Second)})
	r1.NextAt = base.Add(3 * time.Second)
	say("replace r1: %s, id kept %v", outcome(st.PutPending(r1)), names[r1.ID] == "r1")
	schedule()
	counts()

	// Deletes.
	say("delete h2: %s", outcome(st.DeletePending(h2.ID)))
	say("delete h2 again: %s", outcome(st.DeletePending(h2.ID)))
	say("delete malformed: %s", outcome(st.DeletePending("nonsense")))
	say("load h2: %s", outcome(st.LoadMessage(&store.Pending{ID: h2.ID, Message: store.Message{ID: "m3"}})))
	counts()

	// Dead letters.
	d := &store.DeadLetter{Message: message("m2", "order:paid", "pubA"), Reason: "tired"}
	_, err = st.DeadLetter(r1.ID, d)
	say("dead-letter bad reason: %s", outcome(err))
	_, err = st.DeadLetter("nonsense", &store.DeadLetter{Message: message("m2", "t", "p"), Reason: protocol.ReasonMaxRetries})
	say("dead-letter malformed pending id: %s", outcome(err))
	_, err = st.DeadLetter("", nil)
	say("dead-letter nil: %s", outcome(err))
	d1 := &store.DeadLetter{Message: message("m2", "order:paid", "pubA"), ClientID: "agent", Subscription: "order:*",
		Reason: protocol.ReasonMaxRetries, Attempts: r1.Attempts}
	id, err := st.DeadLetter(r1.ID, d1)
	names[id] = "d1"
	say("dead-letter r1: %s, returned d.ID %v, dead at set %v, first %s last %s", outcome(err), id == d1.ID, !d1.DeadAt.IsZero(),
		d1.FirstAttempt.Sub(base), d1.LastAttempt.Sub(base))
	counts()
	d2 := &store.DeadLetter{Message: message("m4", "invoice:sent", "pubB"), Reason: protocol.ReasonNoSubscribers, DeadAt: base}
	id, err = st.DeadLetter("", d2)
	names[id] = "d2"
	say("dead-letter d2: %s", outcome(err))
	d3 := &store.DeadLetter{Message: message("m5", "order:created", "pubB"), Reason: protocol.ReasonRejected, DeadAt: base.Add(time.Hour)}
	id, err = st.DeadLetter(h1.ID, d3)
	names[id] = "d3"
	say("dead-letter h1 as d3: %s", outcome(err))
	counts()

	got, err := st.GetDeadLetter(d1.ID)
	if err == nil {
		say("get d1: %s %s %s %s %q attempts %d", name(got.ID), got.Message.ID, got.Reason, got.ClientID, got.Message.Payload, len(got.Attempts))
	} else {
		say("get d1: %s", outcome(err))
	}
	for _, id := range []string{"d-999999", "x-1", "d-0"} {
		_, err := st.GetDeadLetter(id)
		say("get %s: %s", id, outcome(err))
	}
	list := func(what string, f store.Filter, cursor string, limit int) string {
		entries, next, err := st.ListDeadLetters(f, cursor, limit)
		var ids []string
		for _, e := range entries {
			ids = append(ids, name(e.ID))
		}
		say("list %s: %s %v next %s", what, outcome(err), ids, name(next))
		return next
	}
	next := list("page 1", store.Filter{}, "", 2)
	list("page 2", store.Filter{}, next, 2)
	list("all", store.Filter{}, "", 0)
	list("topic order:*", store.Filter{Topic: "order:*"}, "", 0)
	list("reason", store.Filter{Reason: protocol.ReasonNoSubscribers}, "", 0)
	list("since", store.Filter{Since: base.Add(time.Minute)}, "", 0)
	list("until", store.Filter{Until: base.Add(time.Minute)}, "", 0)
	list("bad topic", store.Filter{Topic: "a[b"}, "", 0)
	list("bad reason", store.Filter{Reason: "tired"}, "", 0)
	list("bad cursor", store.Filter{}, "p-1", 0)

	// Remove, requeue, purge.
	say("remove d2: %s", outcome(st.RemoveDeadLetter(d2.ID)))
	say("remove d2 again: %s", outcome(st.RemoveDeadLetter(d2.ID)))
	say("remove malformed: %s", outcome(st.RemoveDeadLetter("d-x")))
	list("after remove", store.Filter{}, "", 0)
	// A cursor at a removed entry still works.
	list("from removed d2", store.Filter{}, d2.ID, 0)
	rq := &store.Pending{Kind: store.KindRetry, Message: d1.Message, ClientID: d1.ClientID, Subscription: d1.Subscription, NextAt: base}
	say("requeue removed d2: %s, id set %v", outcome(st.Requeue(d2.ID, rq)), rq.ID != "")
	say("requeue malformed: %s", outcome(st.Requeue("p-1", rq)))
	err = st.Requeue(d1.ID, rq)
	names[rq.ID] = "rq"
	say("requeue d1: %s", outcome(err))
	_, err = st.GetDeadLetter(d1.ID)
	say("get requeued d1: %s", outcome(err))
	schedule()
	counts()
	n, err := st.CountDeadLetters()
	say("count dead letters: %d %s", n, outcome(err))
	for _, c := range []string{"a", "b"} {
		if _, err := st.DeadLetter("", &store.DeadLetter{Message: message("m-"+c, "x:"+c, "pubC"), Reason: protocol.ReasonSubscriberGone}); err != nil {
			t.Fatal(err)
		}
	}
	n, err = st.PurgeDeadLetters(store.Filter{Topic: "a[b"})
	say("purge bad filter: %d %s", n, outcome(err))
	n, err = st.PurgeDeadLetters(store.Filter{Reason: protocol.ReasonSubscriberGone})
	say("purge subscriber_gone: %d %s", n, outcome(err))
	list("after purge", store.Filter{}, "", 0)
	n, err = st.PurgeDeadLetters(store.Filter{})
	say("purge all: %d %s", n, outcome(err))
	n, err = st.CountDeadLetters()
	say("count dead letters: %d %s", n, outcome(err))
	list("empty", store.Filter{}, "", 0)
	say("backup: %s", outcome(st.Backup(func(store.Snapshot) error { return nil })))
	return log
}

// TestStoreSemantics runs the same operations on the file store (in
// memory) and on a node's JetStream store, and wants the same outcome of
// each.
func TestStoreSemantics(t *testing.T) {
	want := semantics(t, store.OpenMemory())
	n := startSolo(t, t.TempDir(), nil)
	got := semantics(t, n.Store())
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("step %d:\n file store: %s\n   cluster:  %s", i, w, g)
		} else {
			t.Log(g)
		}
	}
}

// TestStoreIDs checks the cluster's ids: a node's sort in the order it
// made them, go on growing after a restart, and dead letters' are as on
// one node.
func TestStoreIDs(t *testing.T) {
	dir := t.TempDir()
	n := startSolo(t, dir, nil)
	put := func(st *cluster.Store) string {
		p := &store.Pending{Kind: store.KindHold, Message: message("m", "t", "pub")}
		if err := st.PutPending(p); err != nil {
			t.Fatal(err)
		}
		return p.ID
	}
	var ids []string
	for range 3 {
		ids = append(ids, put(n.Store()))
	}
	if err := n.Store().DeletePending(ids[2]); err != nil {
		t.Fatal(err)
	}
	id, err := n.Store().DeadLetter("", &store.DeadLetter{Message: message("m", "t", "pub"), Reason: protocol.ReasonMaxRetries})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, "d-") || len(id) != len("d-000000000001") {
		t.Errorf("dead letter id %q, want d- and 12 digits", id)
	}
	closeNode(n)

	n = startSolo(t, dir, nil)
	ids = append(ids, put(n.Store()))
	t.Log(ids)
	for i, id := range ids {
		if !strings.HasPrefix(id, "p-solo-") || len(id) != len("p-solo-000000000001") {
			t.Errorf("id %q, want p-solo- and 12 digits", id)
		}
		if i > 0 && id <= ids[i-1] {
			t.Errorf("id %q after %q: ids must grow, across restarts too", id, ids[i-1])
		}
	}
	if total, mine, _ := n.Store().PendingUsage("pub"); total.Entries != 3 || mine.Entries != 3 {
		t.Errorf("after restart: counts %d/%d, want 3/3", total.Entries, mine.Entries)
	}
}

// TestStoreMaxMessage stores and reads back a message as large as
// MaxMessageBytes allows, above NATS's default max_payload.
func TestStoreMaxMessage(t *testing.T) {
	const max = 3 << 20
	n := startSolo(t, t.TempDir(), func(o *cluster.Options) { o.MaxMessageBytes = max })
	st := n.Store()
	big := make([]byte, 0, max)
	big = append(big, `{"blob":"`...)
	for len(big) < max-2 {
		big = append(big, "0123456789abcdef"[len(big)%16])
	}
	big = append(big, `"}`...)
	m := message("big", "blob:x", "pub")
	m.Payload = big
	p := &store.Pending{Kind: store.KindRetry, Message: m, ClientID: "c", Subscription: "blob:*", NextAt: time.Now()}
	if err := st.PutPending(p); err != nil {
		t.Fatal(err)
	}
	back := &store.Pending{ID: p.ID, Message: store.Message{ID: "big"}}
	if err := st.LoadMessage(back); err != nil {
		t.Fatal(err)
	}
	if string(back.Message.Payload) != string(big) {
		t.Errorf("payload of %d bytes came back as %d bytes, or changed", len(big), len(back.Message.Payload))
	}
	id, err := st.DeadLetter(p.ID, &store.DeadLetter{Message: m, Reason: protocol.ReasonMaxRetries})
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.GetDeadLetter(id)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Message.Payload) != string(big) {
		t.Errorf("dead letter's payload of %d bytes came back as %d bytes, or changed", len(big), len(d.Message.Payload))
	}
}

// TestStoreMaxPayloadRefused starts a node on an external NATS server
// whose max_payload is too small for MaxMessageBytes.
func TestStoreMaxPayloadRefused(t *testing.T) {
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(bound) {
		t.Fatal("external NATS server not ready")
	}
	_, err = cluster.Start(t.Context(), &cluster.Options{
		Name: "x", NodeID: "x", URL: s.ClientURL(),
		StartTimeout: bound, Logger: testLogger(),
	}, noHandler)
	if err == nil || !strings.Contains(err.Error(), "max_payload") || !strings.Contains(err.Error(), "MaxMessageBytes") {
		t.Errorf("start on a server with the default max_payload: %v, want a refusal naming max_payload and MaxMessageBytes", err)
	}
}

// TestStoreCluster runs the store on three nodes: what one writes, the
// others count and list; a dead node's entries are taken over by two
// nodes at once, and each moves once.
func TestStoreCluster(t *testing.T) {
	nodes, _ := startCluster(t, []string{"a", "b", "c"}, nil)
	a, b, c := nodes[0].Store(), nodes[1].Store(), nodes[2].Store()

	// The largest message the default MaxMessageBytes (1 MiB) lets in,
	// so that its records exceed NATS's default max_payload.
	big := []byte(`{"blob":"` + strings.Repeat("x", 1<<20-12) + `"}`)
	bigMessage := message("big", "blob:x", "pubA")
	bigMessage.Payload = big

	t.Run("shared", func(t *testing.T) {
		var pending []*store.Pending
		for i, m := range []store.Message{message("m1", "order:1", "pubA"), message("m2", "order:2", "pubB"), bigMessage} {
			p := &store.Pending{Kind: store.KindHold, Message: m, NextAt: time.Now().Add(time.Duration(i) * time.Second)}
			if err := a.PutPending(p); err != nil {
				t.Fatal(err)
			}
			pending = append(pending, p)
		}
		// a counts its own writes, b and c what their watches see: the
		// same entries, and the same bytes.
		aTotal, aMine, _ := a.PendingUsage("pubA")
		if aTotal.Entries != 3 || aMine.Entries != 2 || aMine.Bytes <= int64(len(big)) || aTotal.Bytes <= aMine.Bytes {
			t.Errorf("a's counts: %+v in all, %+v pubA's", aTotal, aMine)
		}
		for _, st := range []*cluster.Store{b, c} {
			require.Eventually(t, func() bool {
				total, mine, _ := st.PendingUsage("pubA")
				return total == aTotal && mine == aMine
			}, bound, 20*time.Millisecond, "b and c count a's entries")
		}
		if all, err := b.PendingSchedule(); err != nil || len(all) != 0 {
			t.Errorf("b's schedule holds %d entries (%v); a's are a's", len(all), err)
		}
		all, err := a.PendingSchedule()
		if err != nil || len(all) != 3 {
			t.Fatalf("a's schedule: %d entries, %v", len(all), err)
		}

		var ids []string
		for _, p := range pending[1:] {
			id, err := a.DeadLetter(p.ID, &store.DeadLetter{Message: p.Message, Reason: protocol.ReasonNoSubscribers})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for _, st := range []*cluster.Store{b, c} {
			entries, next, err := st.ListDeadLetters(store.Filter{}, "", 0)
			if err != nil || next != "" || len(entries) != 2 || entries[0].ID != ids[0] || entries[1].ID != ids[1] {
				t.Fatalf("list on another node: %v next %q err %v; want %v", entries, next, err, ids)
			}
			if string(entries[0].Message.Payload) != payload || string(entries[1].Message.Payload) != string(big) {
				t.Error("dead letters' payloads changed on the way")
			}
			if n, err := st.CountDeadLetters(); n != 2 || err != nil {
				t.Errorf("count dead letters: %d %v", n, err)
			}
			require.Eventually(t, func() bool {
				total, _, _ := st.PendingUsage("pubA")
				return total.Entries == 1
			}, bound, 20*time.Millisecond, "the dead-lettered entries leave the counts")
			if u, err := st.DeadLetterUsage(); u.Entries != 2 || u.Bytes <= int64(len(big)) || err != nil {
				t.Errorf("dead-letter usage: %+v %v", u, err)
			}
		}
		// c replays the big one: it becomes c's entry, and the dead
		// letter is gone for everyone.
		rq := &store.Pending{Kind: store.KindRetry, Message: bigMessage, ClientID: "agent", Subscription: "blob:*", NextAt: time.Now()}
		if err := c.Requeue(ids[1], rq); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(rq.ID, "p-c-") {
			t.Errorf("requeued on c as %q, want a p-c- id", rq.ID)
		}
		if _, err := b.GetDeadLetter(ids[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("b gets the requeued dead letter: %v", err)
		}
		if err := b.Requeue(ids[1], &store.Pending{Kind: store.KindHold, Message: bigMessage}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("b requeues it again: %v, want ErrNotFound", err)
		}
		load := &store.Pending{ID: rq.ID, Message: store.Message{ID: "big"}}
		if err := c.LoadMessage(load); err != nil || string(load.Message.Payload) != string(big) {
			t.Errorf("load the requeued message on c: %d bytes, %v", len(load.Message.Payload), err)
		}
		if n, err := b.PurgeDeadLetters(store.Filter{}); n != 1 || err != nil {
			t.Errorf("purge on b: %d, %v; want the one left", n, err)
		}
		if err := a.DeletePending(pending[0].ID); err != nil {
			t.Fatal(err)
		}
		if err := c.DeletePending(rq.ID); err != nil {
			t.Fatal(err)
		}
		require.Eventually(t, func() bool {
			for _, st := range []*cluster.Store{a, b, c} {
				if n, _ := st.CountPending(); n != 0 {
					return false
				}
			}
			return true
		}, bound, 20*time.Millisecond, "every count back to zero")
	})

	t.Run("take back", func(t *testing.T) {
		// c holds two messages for an away owner, is presumed dead, and
		// a takes them over; a sends the second on as a retry (the owner
		// is back elsewhere, it thinks). c, back just then, takes the
		// first back to deliver it in its place; the retry stays a's.
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		defer cancel()
		var held []*store.Pending
		for i := range 2 {
			p := &store.Pending{Kind: store.KindDurable, Message: message(fmt.Sprintf("tb%d", i), "back:x", "pubT"),
				ClientID: "tb-owner", Subscription: "back:*", Subscriber: "tb-identity", NextAt: time.Now().Add(time.Hour)}
			require.NoError(t, c.PutPending(p))
			held = append(held, p)
		}
		moved, err := a.TakeOver(ctx, "c")
		require.NoError(t, err)
		require.Len(t, moved, 2)
		retry := moved[slices.IndexFunc(moved, func(p *store.Pending) bool { return p.ID == held[1].ID })]
		require.NoError(t, a.LoadMessage(retry))
		retry.Kind = store.KindRetry
		require.NoError(t, a.PutPending(retry))

		back, err := c.TakeBack(ctx, held[0])
		require.NoError(t, err)
		require.True(t, back, "the held message is a's")
		load := &store.Pending{ID: held[0].ID, Message: store.Message{ID: "tb0"}}
		require.NoError(t, c.LoadMessage(load))
		require.Equal(t, payload, string(load.Message.Payload))
		require.ErrorIs(t, a.LoadMessage(&store.Pending{ID: held[0].ID, Message: store.Message{ID: "tb0"}}), store.ErrNotFound, "a keeps it too")

		back, err = c.TakeBack(ctx, held[1])
		require.NoError(t, err)
		require.False(t, back, "a retry taken back")
		require.NoError(t, a.LoadMessage(&store.Pending{ID: held[1].ID, Message: store.Message{ID: "tb1"}}))
		back, err = c.TakeBack(ctx, held[0])
		require.NoError(t, err)
		require.False(t, back, "taken back twice")

		require.NoError(t, c.DeletePending(held[0].ID))
		require.NoError(t, a.DeletePending(held[1].ID))
	})

	t.Run("takeover race", func(t *testing.T) {
		// Every third entry is held for an away owner of durable
		// subscriptions, whom a takes them for (TakeHeld) while a and b
		// take the dead node's entries over: three moves of one entry
		// at once, two of them by one node. TakeHeld may also take one
		// from b once b took it over: the bucket then has it under a,
		// and b's schedule holds an entry gone, which b drops when it
		// finds it gone.
		const entries = 40
		const owner = "away-owner"
		want := map[string]bool{}
		held := 0
		for i := range entries {
			m := message(fmt.Sprintf("t%d", i), "race:x", "pubR")
			if i == 0 {
				m = bigMessage
			}
			p := &store.Pending{Kind: store.KindRetry, Message: m, ClientID: "agent", Subscription: "race:*",
				Attempts: []store.Attempt{{At: time.Unix(int64(i), 0).UTC(), Error: "timeout"}}, NextAt: time.Unix(1000+int64(i), 0).UTC()}
			if i%3 == 1 {
				p.Kind, p.ClientID, p.Subscriber = store.KindDurable, owner, "owner-identity"
				held++
			}
			if err := c.PutPending(p); err != nil {
				t.Fatal(err)
			}
			want[p.ID] = true
		}
		require.Eventually(t, func() bool { return a.HeldCount(owner) == held }, bound, 20*time.Millisecond, "a counts the messages held for %s", owner)
		nodes[2].Crash()

		// The bound starts here, not with the test: under load the
		// subtest before can take most of it.
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		defer cancel()
		// a's takeover, b's, and a's TakeHeld.
		var moved [3][]*store.Pending
		var errs [3]error
		var wg sync.WaitGroup
		for i, st := range []*cluster.Store{a, b} {
			wg.Go(func() { moved[i], errs[i] = st.TakeOver(ctx, "c") })
		}
		wg.Go(func() { moved[2], errs[2] = a.TakeHeld(ctx, owner, func(string) bool { return true }) })
		wg.Wait()
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatal(err)
		}
		t.Logf("a took over %d and took %d held, b took over %d", len(moved[0]), len(moved[2]), len(moved[1]))
		for _, p := range moved[2] {
			if p.Kind != store.KindDurable || p.ClientID != owner {
				t.Errorf("TakeHeld took %s, of kind %v for %q", p.ID, p.Kind, p.ClientID)
			}
		}
		seen := map[string]string{}
		for i, list := range moved {
			owner := []string{"a", "b", "a"}[i]
			for _, p := range list {
				if prev, ok := seen[p.ID]; ok && (i < 2 || prev == "a") {
					t.Errorf("%s moved by %s and %s", p.ID, prev, owner)
				}
				seen[p.ID] = owner
				if len(p.Message.Payload) != 0 || len(p.Attempts) != 1 || !strings.HasPrefix(p.Message.ID, "t") && p.Message.ID != "big" {
					t.Errorf("moved entry %s: %+v", p.ID, p)
				}
			}
		}
		if len(seen) != entries {
			t.Errorf("%d entries moved, want %d", len(seen), entries)
		}
		for id := range want {
			if seen[id] == "" {
				t.Errorf("%s not moved", id)
			}
		}
		// The bucket agrees: each entry is now under the node that
		// moved it last, once.
		for i, st := range []*cluster.Store{a, b} {
			all, err := st.PendingSchedule()
			if err != nil {
				t.Fatal(err)
			}
			var got, wantIDs []string
			for _, p := range all {
				got = append(got, p.ID)
			}
			for id, mover := range seen {
				if mover == []string{"a", "b"}[i] {
					wantIDs = append(wantIDs, id)
				}
			}
			slices.Sort(got)
			slices.Sort(wantIDs)
			if !slices.Equal(got, wantIDs) {
				t.Errorf("%s's schedule after the takeover: %v, want what it moved: %v", []string{"a", "b"}[i], got, wantIDs)
			}
			for _, p := range all {
				if p.NextAt != time.Unix(1000+int64(p.Attempts[0].At.Unix()), 0).UTC() {
					t.Errorf("%s: next at %v, attempts %v: not kept", p.ID, p.NextAt, p.Attempts)
				}
				if p.Message.ID == "big" {
					if err := st.LoadMessage(p); err != nil || string(p.Message.Payload) != string(big) {
						t.Errorf("load the big message after takeover: %d bytes, %v", len(p.Message.Payload), err)
					}
				}
			}
		}
		require.Eventually(t, func() bool {
			// The big message is pubA's, the held ones their
			// owner's.
			total, mine, _ := a.PendingUsage("pubR")
			_, owners, _ := a.PendingUsage("owner-identity")
			return total.Entries == entries && mine.Entries == entries-1-held && owners.Entries == held
		}, bound, 20*time.Millisecond, "the counts hold each entry once")
		// Nothing is left to take over.
		if again, err := a.TakeOver(ctx, "c"); err != nil || len(again) != 0 {
			t.Errorf("second takeover: %d moved, %v", len(again), err)
		}
	})
}
