package cluster_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/protocol"
)

// post sends body to srv's POST /v1/messages, with query, and the
// idempotency key, if any, and returns the status, the messageId and
// whether the answer was replayed.
func post(t *testing.T, srv *bustest.Server, body, key string, query ...string) (status int, id string, replayed bool) {
	t.Helper()
	var header map[string]string
	if key != "" {
		header = map[string]string{"Idempotency-Key": key}
	}
	status, h, b := bustest.Post(t, srv.HTTP.URL+"/v1/messages"+strings.Join(query, ""), body, header)
	var a struct {
		MessageID string `json:"messageId"`
	}
	_ = json.Unmarshal(b, &a)
	return status, a.MessageID, h.Get("Idempotent-Replayed") == "true"
}

// TestIdempotencyAcrossNodes publishes over HTTP with an Idempotency-Key
// on one node and repeats it on the other: the repeat gets the first
// answer and publishes nothing, and the key with another body is 409
// there too; a refused request leaves its key free for its retry.
func TestIdempotencyAcrossNodes(t *testing.T) {
	nodes := clustertest.Start(t, nil, "a", "b")
	a, b := nodes[0], nodes[1]
	_, got := bustest.Collect(t, a.URL, "worker", "jobs:*")
	body := `{"topic":"jobs:a","payload":{"type":"t","n":1}}`

	status, first, replayed := post(t, a, body, "k1")
	if status != 201 || first == "" || replayed {
		t.Fatalf("first POST on a: %d %q replayed=%v", status, first, replayed)
	}
	status, again, replayed := post(t, b, body, "k1")
	if status != 201 || again != first || !replayed {
		t.Fatalf("repeat on b: %d %q replayed=%v; want 201 %q replayed", status, again, replayed, first)
	}
	if status, _, _ := post(t, b, `{"topic":"jobs:a","payload":{"type":"t","n":2}}`, "k1"); status != 409 {
		t.Fatalf("the key with another body on b: %d; want 409", status)
	}
	if status, _, _ := post(t, a, `{"topic":"jobs:a","payload":{"type":"t","n":2}}`, "k1"); status != 409 {
		t.Fatalf("the key with another body on a: %d; want 409", status)
	}
	// A refused request releases its key: a retry, fixed, runs.
	if status, _, _ := post(t, b, `{"topic":"jobs:a","payload":{}}`, "k2"); status != 400 {
		t.Fatalf("a request without payload type: %d; want 400", status)
	}
	if status, _, _ := post(t, a, `{"topic":"jobs:a","payload":{"type":"t","n":3}}`, "k2"); status != 201 {
		t.Fatalf("its retry, fixed, on a: %d; want 201 (the key released)", status)
	}
	// A marker from each node, after the repeats: a repeat that
	// published would come before the marker of its node (one publisher,
	// in order).
	var markers []string
	for _, n := range nodes {
		status, id, _ := post(t, n, `{"topic":"jobs:marker","payload":{"type":"marker"}}`, "")
		if status != 201 {
			t.Fatalf("marker: %d", status)
		}
		markers = append(markers, id)
	}
	seen := map[string]int{}
	timeout := time.After(clustertest.Timeout)
	for seen[markers[0]] == 0 || seen[markers[1]] == 0 {
		select {
		case d := <-got:
			seen[d.MessageID]++
		case <-timeout:
			t.Fatalf("delivered %v; want %s and the markers %v", seen, first, markers)
		}
	}
	if len(seen) != 4 || seen[first] != 1 {
		t.Fatalf("delivered %v; want %s once and the markers %v", seen, first, markers)
	}
	select {
	case d := <-got:
		t.Fatalf("delivered %s after the markers", d.MessageID)
	default:
	}
}

// TestIdempotencyBusyAcrossNodes sends a request with a key to one node
// and, while it runs (its subscriber has not answered), the same request
// to the other: that one is 409 and publishes nothing; once the first
// answered, the other node replays its answer.
func TestIdempotencyBusyAcrossNodes(t *testing.T) {
	nodes := clustertest.Start(t, nil, "a", "b")
	a, b := nodes[0], nodes[1]
	invoked, release := make(chan string, 4), make(chan struct{})
	bustest.Connect(t, a.URL, "slow", func(p protocol.ProcessMessageParams) any {
		invoked <- p.MessageID
		<-release
		return protocol.ProcessMessageResult{Processed: true}
	}).Subscribe("slow:*", "")
	body := `{"topic":"slow:a","payload":{"type":"t"}}`
	// The first request runs on a goroutine of its own, which may not
	// fail the test: it hands over what it got.
	first := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", a.HTTP.URL+"/v1/messages?wait=ack", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "k")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- err.Error()
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		first <- fmt.Sprint(res.StatusCode, " ", strings.TrimSpace(string(b)))
	}()
	var id string
	select {
	case id = <-invoked:
	case <-time.After(clustertest.Timeout):
		t.Fatal("the first request was not delivered")
	}
	if status, _, _ := postWait(t, b, body, "k"); status != 409 {
		t.Fatalf("the same request on b while it runs on a: %d; want 409", status)
	}
	close(release)
	if got := <-first; !strings.HasPrefix(got, "201 ") || !strings.Contains(got, `"messageId":"`+id+`"`) {
		t.Fatalf("the first request: %s; want 201 with %s", got, id)
	}
	status, again, replayed := postWait(t, b, body, "k")
	if status != 201 || again != id || !replayed {
		t.Fatalf("the repeat on b once a answered: %d %q replayed=%v; want 201 %q replayed", status, again, replayed, id)
	}
	select {
	case other := <-invoked:
		t.Fatalf("delivered %s too; want %s alone", other, id)
	default:
	}
}

// postWait is post with ?wait=ack.
func postWait(t *testing.T, srv *bustest.Server, body, key string) (int, string, bool) {
	t.Helper()
	return post(t, srv, body, key, "?wait=ack")
}

// TestIdempotencyStore checks the store's keys: a key reserved is busy
// for every other request, its answer replaces the reservation, a
// released key is free again, one identity's key is apart from
// another's, and an expired key is replaced before JetStream's TTL
// removed it.
func TestIdempotencyStore(t *testing.T) {
	st := startSolo(t, t.TempDir(), nil).Store()
	now := time.Now()
	rec := func(answer string, expires time.Time) *store.Idempotent {
		return &store.Idempotent{BodyHash: []byte("sum"), Answer: json.RawMessage(answer), Expires: expires}
	}
	check := func(what string, got *store.Idempotent, err error, want string) {
		t.Helper()
		switch {
		case want == "busy" && !errors.Is(err, bus.ErrIdempotencyBusy):
			t.Fatalf("%s: %v %v; want busy", what, got, err)
		case want == "busy":
		case err != nil:
			t.Fatalf("%s: %v", what, err)
		case want == "" && got != nil:
			t.Fatalf("%s: %s; want none", what, got.Answer)
		case want != "" && (got == nil || string(got.Answer) != want):
			t.Fatalf("%s: %v; want %s", what, got, want)
		}
	}
	r, err := st.GetIdempotent("alice", "k", now)
	check("unused key", r, err, "")
	r, err = st.ReserveIdempotent("alice", "k", now)
	check("reserve", r, err, "")
	r, err = st.ReserveIdempotent("alice", "k", now)
	check("reserve again", r, err, "busy")
	r, err = st.GetIdempotent("alice", "k", now)
	check("get a reserved key", r, err, "")
	if err := st.PutIdempotent("alice", "k", rec(`"one"`, now.Add(time.Hour)), now); err != nil {
		t.Fatal(err)
	}
	r, err = st.ReserveIdempotent("alice", "k", now)
	check("reserve an answered key", r, err, `"one"`)
	r, err = st.GetIdempotent("alice", "k", now)
	check("get an answered key", r, err, `"one"`)
	r, err = st.ReserveIdempotent("bob", "k", now)
	check("another identity's key", r, err, "")
	st.ReleaseIdempotent("bob", "k")
	r, err = st.ReserveIdempotent("bob", "k", now)
	check("a released key", r, err, "")
	if err := st.PutIdempotent("alice", "k", rec(`"two"`, now.Add(time.Hour)), now); err == nil {
		t.Fatal("a second answer, unreserved, replaced the first")
	}
	later := now.Add(2 * time.Hour)
	r, err = st.GetIdempotent("alice", "k", later)
	check("after the window", r, err, "")
	r, err = st.ReserveIdempotent("alice", "k", later)
	check("reserve after the window", r, err, "")
	if err := st.PutIdempotent("alice", "k", rec(`"three"`, later.Add(time.Hour)), later); err != nil {
		t.Fatal(err)
	}
	r, err = st.GetIdempotent("alice", "k", later)
	check("after the replacement", r, err, `"three"`)
	// Keys with any printable character map to valid bucket keys.
	r, err = st.ReserveIdempotent("carol", "a b/c.*>", now)
	check("a key with subject characters", r, err, "")
}

// TestIdempotencyKeyAfterItsTTL: once JetStream's TTL of a key ends, the
// server leaves a marker in its place (no KV-Operation header); the key
// reads as unused, and can be reserved again, rather than as a record
// that does not decode.
func TestIdempotencyKeyAfterItsTTL(t *testing.T) {
	st := startSolo(t, t.TempDir(), nil).Store()
	now := time.Now()
	rec := &store.Idempotent{BodyHash: []byte("sum"), Answer: json.RawMessage(`"one"`), Expires: now.Add(time.Second)}
	if err := st.PutIdempotent("alice", "k", rec, now); err != nil {
		t.Fatal(err)
	}
	// Asked as of now, the record is within its window: only the TTL's
	// marker makes it go. Bounded: the TTL is two seconds.
	checkfor.Check(t, 15*time.Second, func() error {
		r, err := st.GetIdempotent("alice", "k", now)
		if err != nil {
			t.Fatalf("get while the TTL ends: %v", err)
		}
		if r != nil {
			return fmt.Errorf("the key outlived its TTL: %+v", r)
		}
		return nil
	})
	if r, err := st.ReserveIdempotent("alice", "k", now); r != nil || err != nil {
		t.Fatalf("reserve after the TTL: %v %v; want a reservation", r, err)
	}
}
