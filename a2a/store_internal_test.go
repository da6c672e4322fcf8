package a2a

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/cluster/clustertest"
)

// The retention window: a task unchanged for longer is deleted with its
// log and its idempotency key, which then makes a new task; a younger
// one stays, and survives reopening the file.
//
// Both stores, on the same steps: the file, and JetStream on a one-node
// cluster.
func TestStoreRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a2a.db")
	t.Run("bbolt", func(t *testing.T) {
		testRetention(t, func() (taskStore, error) { return openBoltStore(path) })
	})
	t.Run("JetStream", func(t *testing.T) {
		var cl bus.Cluster
		clustertest.StartEach(t, nil, func(_ string, o *bus.Options) { cl = o.Cluster }, "a")
		js, replicas := cluster.StoreOf(cl).JetStream()
		testRetention(t, func() (taskStore, error) {
			return openJetStore(t.Context(), js, replicas, func(spec.TaskID) {})
		})
	})
}

// testRetention is TestStoreRetention on the store open opens.
func testRetention(t *testing.T, open func() (taskStore, error)) {
	st, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.close() }()
	const retention = time.Hour
	t0 := time.Now()
	mk := func(id spec.TaskID, key string, at time.Time) bool {
		t.Helper()
		rec := &taskRecord{Agent: "w", IdemKey: key, Task: spec.Task{ID: id, ContextID: "c", Status: spec.TaskStatus{State: spec.TaskStateSubmitted}}}
		snapshot := rec.Task
		_, created, err := st.create(rec, &snapshot, retention, at)
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	mk("old", "k-old", t0)
	mk("new", "k-new", t0.Add(50*time.Minute))
	if mk("old2", "k-old", t0.Add(10*time.Minute)) {
		t.Fatal("a key within the window made a second task")
	}
	n, err := st.sweep(retention, t0.Add(70*time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("sweep deleted %d, %v; want the old task", n, err)
	}
	if _, err := st.get("old"); !errors.Is(err, errNoTask) {
		t.Fatalf("the old task after the sweep: %v", err)
	}
	if evs, _ := st.events("old", 0); len(evs) != 0 {
		t.Fatalf("the old task's log after the sweep: %d events", len(evs))
	}
	if !mk("old3", "k-old", t0.Add(71*time.Minute)) {
		t.Fatal("the swept task's key still stood for it")
	}
	st.close()
	if st, err = open(); err != nil {
		t.Fatal(err)
	}
	page, total, err := st.list("w", nil, 10, func(*taskRecord) bool { return true })
	if err != nil || total != 2 || page[0].Task.ID != "old3" || page[1].Task.ID != "new" {
		t.Fatalf("after reopening: %d tasks, %v", total, err)
	}
}
