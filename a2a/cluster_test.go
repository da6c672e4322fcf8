package a2a_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/cluster/clustertest"
)

// TestCluster: three bus nodes, each with its own A2A server, share the
// task store in JetStream. A task sent on a is read on b, followed there
// by a resumed stream that hears what a's server writes, retried on c
// without a second task, and changed from every node at once without a
// lost event; one send on every node at once makes one task; then a dies, as kill -9 looks to the others, and the task
// is still read, listed and completed on the survivors, the stream on b
// going on across the death; push notifications are refused on it.
func TestCluster(t *testing.T) {
	var mu sync.Mutex
	clusters := map[string]bus.Cluster{}
	nodes := clustertest.StartEach(t, nil, func(node string, o *bus.Options) {
		mu.Lock()
		defer mu.Unlock()
		clusters[node] = o.Cluster
	}, "a", "b", "c")
	doors := map[string]*fixture{}
	// Started c, b, a: a's server subscribes outbound:a2a- last, so it
	// takes the agents' answers (last match wins) until it dies.
	for _, i := range []int{2, 1, 0} {
		id := string(rune('a' + i))
		js, replicas := cluster.StoreOf(clusters[id]).JetStream()
		f := &fixture{bus: nodes[i], opts: a2a.Options{
			BusURL:    nodes[i].URL,
			Agents:    []a2a.Agent{{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"}},
			Path:      filepath.Join(t.TempDir(), "unused.db"),
			JetStream: js,
			Replicas:  replicas,
			Node:      id,
			Logger:    slog.New(slog.DiscardHandler),
		}}
		f.open(t)
		doors[id] = f
	}
	a, b, c := doors["a"], doors["b"], doors["c"]
	began := time.Now()
	agent := a2atest.StartAgent(t, nodes[2].URL, "w", "", "agent:w")

	// Sent on a; the agent, on c, answers through a's server. Read on
	// b, and followed there from the event the client had.
	task, p, last := agent.StartWorking(t, a.url("w"), "m-1", "write")
	follow, last := agent.FollowElsewhere(t, b.url("w"), task, p, last)
	var got spec.Task

	// A retry on c is the same task, and publishes nothing.
	if again := a2atest.Submit(t, c.url("w"), "m-1", "write"); again.ID != task.ID {
		t.Fatalf("the retry on c made task %s, want %s", again.ID, task.ID)
	}

	// One new send on the three nodes at once: one task, published once
	// (the idempotency record is written only where none is).
	var wg sync.WaitGroup
	sent := make(chan any, 3)
	for _, d := range []*fixture{a, b, c} {
		wg.Go(func() {
			task, err := a2atest.TrySubmit(t.Context(), d.url("w"), "m-2", "once")
			if err != nil {
				sent <- err
				return
			}
			sent <- task.ID
		})
	}
	wg.Wait()
	close(sent)
	var once spec.TaskID
	for v := range sent {
		id, ok := v.(spec.TaskID)
		switch {
		case !ok:
			t.Fatal(v)
		case once == "":
			once = id
		case id != once:
			t.Fatalf("one send on three nodes at once made tasks %s and %s", once, id)
		}
	}
	if got := agent.Next(t); got.A2A.Message.ID != "m-2" {
		t.Fatalf("the agent got %q, want m-2", got.A2A.Message.ID)
	}

	// Messages to the task on all three nodes at once: each node writes
	// over the change it read, and reads again when another came first.
	const each = 4
	errs := make(chan error, 3*each)
	for _, d := range []*fixture{a, b, c} {
		for j := range each {
			wg.Go(func() {
				params := a2atest.UserMessage(fmt.Sprintf("more-%s-%d", d.http.URL, j), "more")
				params["message"].(map[string]any)["taskId"] = task.ID
				params["configuration"] = map[string]any{"returnImmediately": true}
				_, err := a2atest.TryPost(t.Context(), d.url("w"), "SendMessage", params)
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 3 * each {
		// Each message reached the agent once, and m-2 no more.
		if got := agent.Next(t); !strings.HasPrefix(got.A2A.Message.ID, "more-") {
			t.Fatalf("the agent got %q, want one of the messages sent at once", got.A2A.Message.ID)
		}
	}
	a2atest.Post(t, c.url("w"), "GetTask", map[string]any{"id": task.ID}).Decode(t, &got)
	if n := len(got.History); n != 1+3*each+1 {
		t.Fatalf("the task's history has %d messages after %d sent at once, want %d: a change was lost", n, 3*each, 1+3*each+1)
	}
	// The stream on b saw every one of them, in order: one event each.
	for range 3 * each {
		ev, ok := follow.Next(t)
		if su, isStatus := ev.Decode(t).(*spec.TaskStatusUpdateEvent); !ok || ev.ID != last+1 || !isStatus || su.Status.State != spec.TaskStateWorking {
			t.Fatalf("the stream on b after event %d: %+v, ok %v", last, ev, ok)
		}
		last = ev.ID
	}

	// a dies as kill -9 looks to the others: its cluster node and its
	// connections go at once, with none of its keys removed.
	t.Logf("a dies %v into the test", time.Since(began).Round(time.Millisecond))
	died := time.Now()
	clusters["a"].(interface{ Crash() }).Crash()
	nodes[0].HTTP.CloseClientConnections()
	a.close()

	a2atest.Post(t, c.url("w"), "GetTask", map[string]any{"id": task.ID}).Decode(t, &got)
	if got.ID != task.ID || len(got.Artifacts) != 1 {
		t.Fatalf("GetTask on c after a died: %+v", got)
	}
	// The agent's answer reaches a survivor's server once a's
	// subscription has left the order (the node timeout); until then it
	// goes to a, whose delivery fails.
	agent.CompleteAfterDeath(t, p, follow, last, clustertest.Timeout)
	t.Logf("the answer reached a survivor's server %v after a died", time.Since(died).Round(time.Millisecond))

	// No push notifications on a cluster: the card says so, and every
	// way to make, read or delete a config answers
	// PushNotificationNotSupportedError, a SendMessage with one making
	// no task (ListTasks below).
	if card := a2atest.AwaitCard(t, b.url("w")); card.Capabilities.PushNotifications {
		t.Fatal("the card on b offers push notifications on a cluster")
	}
	config := map[string]any{"url": "https://example.com/hook", "id": "c-1"}
	for method, params := range map[string]map[string]any{
		"CreateTaskPushNotificationConfig": {"taskId": task.ID, "url": config["url"]},
		"GetTaskPushNotificationConfig":    {"taskId": task.ID, "id": config["id"]},
		"ListTaskPushNotificationConfigs":  {"taskId": task.ID},
		"DeleteTaskPushNotificationConfig": {"taskId": task.ID, "id": config["id"]},
	} {
		a2atest.Post(t, c.url("w"), method, params).WantCode(t, a2a.CodePushNotSupported)
	}
	pushed := a2atest.UserMessage("m-push", "pushed")
	pushed["configuration"] = map[string]any{"taskPushNotificationConfig": config}
	a2atest.Post(t, b.url("w"), "SendMessage", pushed).WantCode(t, a2a.CodePushNotSupported)

	var list spec.ListTasksResponse
	a2atest.Post(t, b.url("w"), "ListTasks", map[string]any{}).Decode(t, &list)
	if list.TotalSize != 2 || list.Tasks[0].ID != task.ID || list.Tasks[0].Status.State != spec.TaskStateCompleted || list.Tasks[1].ID != once {
		t.Fatalf("ListTasks on b: %+v", list)
	}
}
