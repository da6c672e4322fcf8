package cluster_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
)

// post sends body to srv's POST /v1/messages with the idempotency key,
// if any, and returns the status, the messageId and whether the answer
// was replayed.
func post(t *testing.T, srv *bustest.Server, body, key string) (status int, id string, replayed bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bustest.ClusterTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", srv.HTTP.URL+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("POST: read answer: %v", err)
	}
	var a struct {
		MessageID string `json:"messageId"`
	}
	_ = json.Unmarshal(b, &a)
	return res.StatusCode, a.MessageID, res.Header.Get("Idempotent-Replayed") == "true"
}

// TestIdempotencyAcrossNodes publishes over HTTP with an Idempotency-Key
// on one node and repeats it on the other: the repeat gets the first
// answer and publishes nothing, and the key with another body is 409
// there too.
func TestIdempotencyAcrossNodes(t *testing.T) {
	nodes := bustest.StartCluster(t, nil, "a", "b")
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
	timeout := time.After(bustest.ClusterTimeout)
	for seen[markers[0]] == 0 || seen[markers[1]] == 0 {
		select {
		case d := <-got:
			seen[d.MessageID]++
		case <-timeout:
			t.Fatalf("delivered %v; want %s and the markers %v", seen, first, markers)
		}
	}
	if len(seen) != 3 || seen[first] != 1 {
		t.Fatalf("delivered %v; want %s once and the markers %v", seen, first, markers)
	}
	select {
	case d := <-got:
		t.Fatalf("delivered %s after the markers", d.MessageID)
	default:
	}
}

// TestIdempotencyStore checks the store's keys: read within the window
// only, one identity's key apart from another's, a key recorded first
// kept, and an expired key replaced before JetStream's TTL removed it.
func TestIdempotencyStore(t *testing.T) {
	st := startSolo(t, t.TempDir(), nil).Store()
	now := time.Now()
	rec := func(answer string) *store.Idempotent {
		return &store.Idempotent{BodyHash: []byte("sum"), Answer: json.RawMessage(answer), Expires: now.Add(time.Hour)}
	}
	if r, err := st.GetIdempotent("alice", "k", now); err != nil || r != nil {
		t.Fatalf("unused key: %v %v", r, err)
	}
	if err := st.PutIdempotent("alice", "k", rec(`"one"`), now); err != nil {
		t.Fatal(err)
	}
	r, err := st.GetIdempotent("alice", "k", now)
	if err != nil || r == nil || string(r.Answer) != `"one"` {
		t.Fatalf("within the window: %+v %v", r, err)
	}
	if r, err := st.GetIdempotent("bob", "k", now); err != nil || r != nil {
		t.Fatalf("another identity's key: %+v %v", r, err)
	}
	if err := st.PutIdempotent("alice", "k", rec(`"two"`), now); err == nil || !strings.Contains(err.Error(), "another node first") {
		t.Fatalf("a second record within the window: %v; want refused", err)
	}
	later := now.Add(2 * time.Hour)
	if r, err := st.GetIdempotent("alice", "k", later); err != nil || r != nil {
		t.Fatalf("after the window: %+v %v", r, err)
	}
	three := rec(`"three"`)
	three.Expires = later.Add(time.Hour)
	if err := st.PutIdempotent("alice", "k", three, later); err != nil {
		t.Fatalf("replace the expired key: %v", err)
	}
	if r, err := st.GetIdempotent("alice", "k", later); err != nil || r == nil || string(r.Answer) != `"three"` {
		t.Fatalf("after the replacement: %+v %v", r, err)
	}
	// Keys with any printable character map to valid bucket keys.
	if err := st.PutIdempotent("carol", "a b/c.*>", rec(`"four"`), now); err != nil {
		t.Fatal(err)
	}
}
