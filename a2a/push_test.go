package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/bus/webhook"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// startPush starts a bus with webhooks (to loopback when allowPrivate)
// on opts, an A2A server with agent "w" on agent:w (with retention, 0
// for the default), and an A2A-aware agent there.
func startPush(t *testing.T, opts bus.Options, allowPrivate bool, retention time.Duration) (*fixture, *a2atest.Agent) {
	t.Helper()
	st := store.OpenMemory()
	opts.Store = st
	opts.Extensions = []bus.Extension{webhook.New(webhook.Options{AllowPrivate: allowPrivate, Store: st})}
	f := &fixture{bus: bustest.Start(t, &opts)}
	f.opts = a2a.Options{
		BusURL: f.bus.URL, Agents: []a2a.Agent{{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"}},
		Path: filepath.Join(t.TempDir(), "a2a.db"), Logger: slog.New(slog.DiscardHandler), Retention: retention,
	}
	f.open(t)
	return f, a2atest.StartAgent(t, f.bus.URL, "w", "", "agent:w")
}

// sendWithPush starts a task with a push notification config, at once.
func sendWithPush(t *testing.T, url, id string, config map[string]any) *spec.Task {
	t.Helper()
	params := a2atest.UserMessage(id, "report, please")
	params["configuration"] = map[string]any{"returnImmediately": true, "taskPushNotificationConfig": config}
	var sr spec.StreamResponse
	a2atest.Post(t, url, "SendMessage", params).Decode(t, &sr)
	task, ok := sr.Event.(*spec.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want a task", sr.Event)
	}
	return task
}

func status(state, text string) map[string]any {
	return map[string]any{"type": "a2a_status", "state": state, "text": text}
}

// TestPushNotifications: a config made with SendMessage gets every
// event of its task, in order, as the StreamResponse its stream carries,
// signed with its token and with its authentication; the four config
// methods work from a2a-go's client, and a deleted config gets nothing
// more.
func TestPushNotifications(t *testing.T) {
	t.Parallel()
	f, agent := startPush(t, bus.Options{}, true, 0)
	rc := a2atest.NewPushReceiver(t)
	url := f.url("w")

	task := sendWithPush(t, url, "m-1", map[string]any{"url": rc.URL + "/a", "token": "tok-a",
		"authentication": map[string]any{"scheme": "Bearer", "credentials": "cred-a"}})
	p := agent.TaskOf(t, task)
	agent.Say(t, p, status("working", "drafting"))
	agent.Say(t, p, map[string]any{"type": "a2a_artifact", "artifact": map[string]any{"artifactId": "d", "parts": []any{map[string]any{"text": "draft"}}}})
	agent.Say(t, p, status("completed", "done"))
	log := a2atest.OpenStream(t, url, "SubscribeToTask", map[string]any{"id": task.ID}, "Last-Event-ID", "0").All(t)
	if len(log) < 4 {
		t.Fatalf("the task logged %d events, want at least 4", len(log))
	}
	for _, ev := range log {
		n := rc.Next(t)
		n.Verify(t, "tok-a")
		if got := n.Header.Get("Authorization"); got != "Bearer cred-a" {
			t.Errorf("Authorization %q", got)
		}
		for name := range n.Header {
			for _, v := range n.Header[name] {
				if strings.Contains(v, "tok-a") {
					t.Errorf("header %s carries the token, the signature's key: %q", name, v)
				}
			}
		}
		if ct := n.Header.Get("Content-Type"); ct != "application/a2a+json" {
			t.Errorf("Content-Type %q", ct)
		}
		var want, got any
		_ = json.Unmarshal(ev.Res.Result, &want)
		if err := json.Unmarshal(n.Body, &got); err != nil || !jsonEqual(want, got) {
			t.Fatalf("notification %s, want event %d of the task's log %s", n.Body, ev.ID, ev.Res.Result)
		}
	}

	// The config methods, from a2a-go's client.
	card, err := agentcard.NewResolver(http.DefaultClient).Resolve(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	if !card.Capabilities.PushNotifications {
		t.Fatal("the card does not declare pushNotifications")
	}
	client, err := a2aclient.NewFromCard(t.Context(), card)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Destroy()
	list, err := client.ListTaskPushConfigs(t.Context(), &spec.ListTaskPushConfigRequest{TaskID: task.ID})
	if err != nil || len(list) != 1 || list[0].URL != rc.URL+"/a" || list[0].ID == "" || list[0].TaskID != task.ID {
		t.Fatalf("ListTaskPushConfigs: %+v, %v", list, err)
	}

	// A second task, with two configs made on it while it works; one is
	// deleted and gets nothing more.
	task2 := a2atest.Submit(t, url, "m-2", "again")
	p2 := agent.TaskOf(t, task2)
	agent.Say(t, p2, status("working", "started"))
	s := a2atest.OpenStream(t, url, "SubscribeToTask", map[string]any{"id": task2.ID}, "Last-Event-ID", "0")
	s.UntilStatusText(t, "started") // the bus's ack of the publish is in before it
	s.Close()
	for _, id := range []string{"a", "b"} {
		made, err := client.CreateTaskPushConfig(t.Context(), &spec.PushConfig{TaskID: task2.ID, ID: id, URL: rc.URL + "/" + id, Token: "tok-" + id})
		if err != nil || made.ID != id || made.TaskID != task2.ID {
			t.Fatalf("CreateTaskPushConfig %s: %+v, %v", id, made, err)
		}
	}
	agent.Say(t, p2, status("working", "one"))
	paths := map[string]bool{}
	for range 2 {
		n := rc.Next(t)
		n.Verify(t, "tok"+strings.ReplaceAll(n.Path, "/", "-"))
		paths[n.Path] = true
	}
	if !paths["/a"] || !paths["/b"] {
		t.Fatalf("the event went to %v, want /a and /b", paths)
	}
	if err := client.DeleteTaskPushConfig(t.Context(), &spec.DeleteTaskPushConfigRequest{TaskID: task2.ID, ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := client.DeleteTaskPushConfig(t.Context(), &spec.DeleteTaskPushConfigRequest{TaskID: task2.ID, ID: "a"}); err != nil {
		t.Fatalf("a second delete: %v (it must be idempotent)", err)
	}
	if _, err := client.GetTaskPushConfig(t.Context(), &spec.GetTaskPushConfigRequest{TaskID: task2.ID, ID: "a"}); err == nil {
		t.Fatal("GetTaskPushConfig found the deleted config")
	}
	if got, err := client.GetTaskPushConfig(t.Context(), &spec.GetTaskPushConfigRequest{TaskID: task2.ID, ID: "b"}); err != nil || got.URL != rc.URL+"/b" {
		t.Fatalf("GetTaskPushConfig b: %+v, %v", got, err)
	}
	agent.Say(t, p2, status("working", "two"))
	agent.Say(t, p2, status("completed", "three"))
	for _, text := range []string{"two", "three"} {
		n := rc.Next(t)
		su, ok := n.Event(t).(*spec.TaskStatusUpdateEvent)
		if n.Path != "/b" || !ok || su.Status.Message.Parts[0].Text() != text {
			t.Fatalf("after the delete: %s %s, want %q to /b", n.Path, n.Body, text)
		}
	}
	// "three" went out after "two" was answered by every subscriber, so
	// a notification of "two" to /a would be here by now.
	rc.None(t)
	a2atest.Post(t, url, "GetTaskPushNotificationConfig", map[string]any{"taskId": "nope", "id": "b"}).WantCode(t, a2a.CodeTaskNotFound)
}

// jsonEqual compares two decoded JSON values.
func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestPushRetriedThenDeadLettered: a receiver that fails gets the
// notification again, with the bus's backoff, and then the bus
// dead-letters it, as every webhook's delivery.
func TestPushRetriedThenDeadLettered(t *testing.T) {
	t.Parallel()
	f, agent := startPush(t, bus.Options{MaxAttempts: 3, RetryBaseDelay: time.Millisecond, RetryDelayCap: 10 * time.Millisecond}, true, 0)
	watcher, err := peer.Dial(t.Context(), f.bus.URL, &peer.Options{ClientID: "ops", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	dead := make(chan map[string]any, 64)
	err = watcher.Subscribe(t.Context(), protocol.TopicDeadLettered, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var ev map[string]any
		_ = d.Decode(&ev)
		dead <- ev
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	statuses := make([]int, 64)
	for i := range statuses {
		statuses[i] = http.StatusServiceUnavailable
	}
	rc := a2atest.NewPushReceiver(t, statuses...)
	task := sendWithPush(t, f.url("w"), "m-1", map[string]any{"url": rc.URL, "token": "tok"})
	agent.TaskOf(t, task)

	// The first notification (the task) is tried three times.
	first := rc.Next(t)
	if _, ok := first.Event(t).(*spec.Task); !ok {
		t.Fatalf("first notification %s, want the task", first.Body)
	}
	id := first.Header.Get(webhook.HeaderMessageID)
	for attempt := 2; attempt <= 3; {
		n := rc.Next(t)
		if n.Header.Get(webhook.HeaderMessageID) != id {
			continue // the next event's notification, failing too
		}
		n.Verify(t, "tok")
		if got := n.Header.Get(webhook.HeaderAttempt); got != strconv.Itoa(attempt) {
			t.Fatalf("attempt header %q, want %d", got, attempt)
		}
		attempt++
	}
	for {
		select {
		case ev := <-dead:
			if ev["messageId"] == id {
				if ev["reason"] != "max_retries" || !strings.HasPrefix(ev["client_id"].(string), "bub-webhook-a2a-") {
					t.Fatalf("dead-letter event %v", ev)
				}
				return
			}
		case <-time.After(a2atest.Timeout):
			t.Fatalf("no dead-letter event for push notification %s within %v", id, a2atest.Timeout)
		}
	}
}

// TestPushPrivateAddressRefused: on a bus that does not call private
// addresses, a config to one is refused with the flag that allows it,
// and a SendMessage that carries one makes no task.
func TestPushPrivateAddressRefused(t *testing.T) {
	t.Parallel()
	f, _ := startPush(t, bus.Options{}, false, 0)
	url := f.url("w")
	params := a2atest.UserMessage("m-1", "hi")
	params["configuration"] = map[string]any{"taskPushNotificationConfig": map[string]any{"url": "http://127.0.0.1:9/hook"}}
	res := a2atest.Post(t, url, "SendMessage", params)
	res.WantCode(t, a2a.CodeInvalidParams)
	if !strings.Contains(res.Error.Message, "--webhook-allow-private") || !strings.Contains(res.Error.Message, "taskPushNotificationConfig") {
		t.Fatalf("error %q does not say where and what allows it", res.Error.Message)
	}
	var list spec.ListTasksResponse
	a2atest.Post(t, url, "ListTasks", map[string]any{}).Decode(t, &list)
	if list.TotalSize != 0 {
		t.Fatalf("the refused send made %d tasks", list.TotalSize)
	}
	task := a2atest.Submit(t, url, "m-2", "hi")
	res = a2atest.Post(t, url, "CreateTaskPushNotificationConfig", map[string]any{"taskId": task.ID, "url": "http://10.0.0.1/hook"})
	res.WantCode(t, a2a.CodeInvalidParams)
	if !strings.Contains(res.Error.Message, "--webhook-allow-private") {
		t.Fatalf("error %q", res.Error.Message)
	}
	a2atest.Post(t, url, "CreateTaskPushNotificationConfig", map[string]any{"taskId": task.ID, "url": "ftp://example.com/"}).WantCode(t, a2a.CodeInvalidParams)
}

// TestPushConfigsGoWithTask: when the retention window deletes a task,
// its configs and their webhook subscriptions on the bus go with it.
func TestPushConfigsGoWithTask(t *testing.T) {
	t.Parallel()
	f, agent := startPush(t, bus.Options{}, true, 300*time.Millisecond)
	rc := a2atest.NewPushReceiver(t)
	task := sendWithPush(t, f.url("w"), "m-1", map[string]any{"url": rc.URL, "token": "tok"})
	agent.Say(t, agent.TaskOf(t, task), status("completed", "done"))
	admin := bustest.Dial(t, f.bus.URL)
	admin.Initialize("ops")
	hooks := func() []string {
		var list protocol.WebhookListResult
		admin.MustCall(protocol.MethodWebhookList, map[string]any{}, &list)
		var names []string
		for _, w := range list.Webhooks {
			names = append(names, w.Name)
		}
		return names
	}
	if len(hooks()) != 1 {
		t.Fatalf("webhook subscriptions %v, want the config's", hooks())
	}
	checkfor.Check(t, a2atest.Timeout, func() error {
		res := a2atest.Post(t, f.url("w"), "GetTask", map[string]any{"id": task.ID})
		if names := hooks(); res.Error == nil || len(names) > 0 {
			return fmt.Errorf("after the retention window: GetTask %s / %+v, webhook subscriptions %v; want neither", res.Result, res.Error, names)
		}
		return nil
	})
}
