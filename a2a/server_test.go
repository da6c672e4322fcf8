package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// An A2A client that knows nothing of the bus discovers the echo agent,
// a bus agent that knows nothing of A2A, and gets its ordinary reply as
// the completed task's message.
func TestEchoAgentCompletesTask(t *testing.T) {
	t.Parallel()
	f := start(t, a2a.Agent{Name: "echo", Description: "echoes", Topic: "tg:a2a-echo", ClientID: "a2a-gw",
		Skills: []a2a.Skill{{ID: "echo", Name: "Echo", Tags: []string{"test"}}}})
	startEchoAgent(t, f.bus.URL, "echo", "tg:a2a-echo")

	card, err := agentcard.NewResolver(http.DefaultClient).Resolve(t.Context(), f.url("echo"))
	if err != nil {
		t.Fatal(err)
	}
	if card.Name != "echo" || len(card.Skills) != 1 || !card.Capabilities.Streaming || len(card.Capabilities.Extensions) != 2 {
		t.Fatalf("card: %+v", card)
	}
	client, err := a2aclient.NewFromCard(t.Context(), card)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Destroy()
	msg := spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart("hello"))
	res, err := client.SendMessage(t.Context(), &spec.SendMessageRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*spec.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want a task", res)
	}
	if task.Status.State != spec.TaskStateCompleted || task.Status.Message == nil || task.Status.Message.Parts[0].Text() != "echo: hello" {
		t.Fatalf("task: %+v, status message %+v", task.Status, task.Status.Message)
	}
	got, err := client.GetTask(t.Context(), &spec.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.State != spec.TaskStateCompleted || len(got.History) != 2 || got.History[0].ID != msg.ID {
		t.Fatalf("GetTask: %+v, history %d", got.Status, len(got.History))
	}
	list, err := client.ListTasks(t.Context(), &spec.ListTasksRequest{ContextID: task.ContextID})
	if err != nil {
		t.Fatal(err)
	}
	if list.TotalSize != 1 || list.Tasks[0].ID != task.ID {
		t.Fatalf("ListTasks: %+v", list)
	}
}

// The walk of the issue: send a streaming message, drop the stream
// midway, resume with Last-Event-ID and lose no event, then retry the
// send and get the same task with nothing published again.
func TestStreamResumeAndRetry(t *testing.T) {
	t.Parallel()
	f := start(t, a2a.Agent{Name: "writer", Topic: "agent:writer", ClientID: "a2a-gw"})
	agent := a2atest.StartAgent(t, f.bus.URL, "writer", "", "agent:writer")
	url := f.url("writer")

	s := a2atest.OpenStream(t, url, "SendStreamingMessage", a2atest.UserMessage("m-1", "write"))
	first, ok := s.Next(t)
	if !ok || first.ID != 1 {
		t.Fatalf("first event: %+v, ok %v", first, ok)
	}
	task, isTask := first.Decode(t).(*spec.Task)
	if !isTask || task.Status.State != spec.TaskStateSubmitted {
		t.Fatalf("first event is %T %+v, want the submitted task", first.Decode(t), task)
	}
	p := agent.Next(t)
	if p.CorrelationID != string(task.ID) || p.ConversationID != task.ContextID || p.Text != "write" || p.A2A.Message.ID != "m-1" {
		t.Fatalf("payload on the bus: %+v", p)
	}
	agent.Say(t, p, map[string]any{"type": "a2a_status", "state": "working", "text": "drafting"})
	last := s.UntilStatusText(t, "drafting")
	s.Close() // the client loses its stream

	for i, text := range []string{"part one", "part two"} {
		agent.Say(t, p, map[string]any{"type": "a2a_artifact", "append": i > 0, "lastChunk": i == 1,
			"artifact": map[string]any{"artifactId": "draft", "parts": []any{map[string]any{"text": text}}}})
	}
	agent.Say(t, p, map[string]any{"type": "a2a_status", "state": "completed", "text": "done"})

	resumed := a2atest.OpenStream(t, url, "SubscribeToTask", map[string]any{"id": task.ID}, "Last-Event-ID", strconv.FormatUint(last, 10)).All(t)
	a2atest.CheckResumed(t, resumed, last, 3)
	if su, ok := resumed[2].Decode(t).(*spec.TaskStatusUpdateEvent); !ok || su.Status.State != spec.TaskStateCompleted {
		t.Fatalf("last event: %+v", resumed[2].Decode(t))
	}

	// The retry: same messageId, a blocking send.
	var again spec.StreamResponse
	a2atest.Post(t, url, "SendMessage", a2atest.UserMessage("m-1", "write")).Decode(t, &again)
	if got := again.Event.(*spec.Task); got.ID != task.ID || got.Status.State != spec.TaskStateCompleted ||
		len(got.Artifacts) != 1 || len(got.Artifacts[0].Parts) != 2 {
		t.Fatalf("retry answered %+v", got)
	}
	// A new message is the agent's next, so the retry published nothing.
	a2atest.Submit(t, url, "m-2", "other")
	if next := agent.Next(t); next.A2A.Message.ID != "m-2" {
		t.Fatalf("the agent's next message is %q, want m-2: the retry was published", next.A2A.Message.ID)
	}
	// An Idempotency-Key stands for the message id.
	if a2atest.Submit(t, url, "m-3", "keyed", "Idempotency-Key", "k").ID != a2atest.Submit(t, url, "m-4", "keyed", "Idempotency-Key", "k").ID {
		t.Fatal("two sends with one Idempotency-Key made two tasks")
	}
	// Three tasks (m-1, m-2, m-3) and two retries (m-1 again, m-4 under
	// m-3's key).
	err := testutil.GatherAndCompare(f.reg, strings.NewReader(`
# HELP bub_a2a_idempotent_replays_total A2A sends that an idempotency key or messageId recognised as a retry, which published nothing, by agent.
# TYPE bub_a2a_idempotent_replays_total counter
bub_a2a_idempotent_replays_total{agent="writer"} 2
# HELP bub_a2a_tasks_created_total A2A tasks created, each one message published on the agent's topic, by agent.
# TYPE bub_a2a_tasks_created_total counter
bub_a2a_tasks_created_total{agent="writer"} 3
`), "bub_a2a_tasks_created_total", "bub_a2a_idempotent_replays_total")
	if err != nil {
		t.Error(err)
	}
}

// A task, its events and its idempotency record survive the A2A
// server's restart: the store is on disk. An answer the agent gives
// while the server is down is held by the bus for the server's durable
// subscription and reaches the task once it is back.
func TestTaskSurvivesRestart(t *testing.T) {
	t.Parallel()
	f, agent := startW(t)
	task := a2atest.Submit(t, f.url("w"), "m-1", "hi")
	p := agent.TaskOf(t, task)
	agent.Say(t, p, map[string]any{"type": "a2a_status", "state": "input-required", "text": "which one?"})

	// The bus holds the answer once it has dropped the server's
	// connection; until then (the connection closing) it would take the
	// answer as not sent and retry it instead.
	gone := make(chan struct{})
	var once sync.Once
	err := agent.Conn.Subscribe(t.Context(), bus.TopicClientDisconnected, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var ev protocol.ClientEvent
		if d.Decode(&ev) == nil && ev.ClientID == "a2a-gw" {
			once.Do(func() { close(gone) })
		}
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.close()
	select {
	case <-gone:
	case <-time.After(a2atest.Timeout):
		t.Fatalf("the bus did not say the A2A server's connection was gone within %v", a2atest.Timeout)
	}
	res, err := agent.Conn.SendMessage(t.Context(), p.ReplyTo, map[string]any{"type": "plaintext_message", "text": "this one"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Acks) != 1 || !res.Acks[0].Held {
		t.Fatalf("the answer to a server that is down was not held: %+v", res)
	}
	f.open(t)
	// The held answer comes with the server's durable subscription, a
	// moment after it is back.
	got := a2atest.AwaitState(t, f.url("w"), task.ID, spec.TaskStateCompleted)
	if got.Status.Message.Parts[0].Text() != "this one" || len(got.History) != 3 {
		t.Fatalf("after restart: %+v, %d messages", got.Status, len(got.History))
	}
	evs := a2atest.OpenStream(t, f.url("w"), "SubscribeToTask", map[string]any{"id": task.ID}, "Last-Event-ID", "0").All(t)
	if len(evs) < 3 || evs[0].ID != 1 {
		t.Fatalf("the log after restart: %d events", len(evs))
	}
	if a2atest.Submit(t, f.url("w"), "m-1", "hi").ID != task.ID {
		t.Fatal("the idempotency record did not survive the restart")
	}
}

// Errors are the specification's codes, where a2a-go's server departs
// from it too.
func TestErrors(t *testing.T) {
	t.Parallel()
	f, agent := startW(t)
	url := f.url("w")

	a2atest.Post(t, url, "SendMessage", a2atest.UserMessage("m-1", "hi"), "A2A-Version", "99.0").WantCode(t, a2a.CodeVersionNotSupported)
	a2atest.Post(t, url, "GetTask", map[string]any{"id": "nope"}).WantCode(t, a2a.CodeTaskNotFound)
	a2atest.Post(t, url, "message/send", a2atest.UserMessage("m-1", "hi")).WantCode(t, a2a.CodeMethodNotFound)
	a2atest.Post(t, url, "SendMessage", map[string]any{"message": map[string]any{"messageId": "x", "role": "ROLE_USER", "parts": []any{}}}).WantCode(t, a2a.CodeInvalidParams)
	a2atest.Post(t, url, "CreateTaskPushNotificationConfig", map[string]any{}).WantCode(t, a2a.CodeInvalidParams)
	a2atest.Post(t, url, "GetExtendedAgentCard", map[string]any{}).WantCode(t, a2a.CodeUnsupportedOperation)
	a2atest.Post(t, url, "ListTasks", map[string]any{"pageSize": 1000}).WantCode(t, a2a.CodeInvalidParams)
	a2atest.Post(t, url, "ListTasks", map[string]any{"pageToken": "!!"}).WantCode(t, a2a.CodeInvalidParams)

	sent := a2atest.Submit(t, url, "m-1", "hi")
	id := sent.ID
	agent.Say(t, agent.Next(t), map[string]any{"type": "plaintext_message", "text": "done"})
	var done spec.Task
	a2atest.Post(t, url, "GetTask", map[string]any{"id": id}).Decode(t, &done)
	if done.Status.State != spec.TaskStateCompleted {
		// The answer is in before the agent's SendMessage returns.
		t.Fatalf("after the answer: %s", done.Status.State)
	}
	a2atest.Post(t, url, "CancelTask", map[string]any{"id": id}).WantCode(t, a2a.CodeTaskNotCancelable)
	cont := a2atest.UserMessage("m-2", "more")
	cont["message"].(map[string]any)["taskId"] = id
	a2atest.Post(t, url, "SendMessage", cont).WantCode(t, a2a.CodeUnsupportedOperation)
	sub := a2atest.OpenStream(t, url, "SubscribeToTask", map[string]any{"id": id}).All(t)
	if len(sub) != 1 || sub[0].Res.Error == nil || sub[0].Res.Error.Code != a2a.CodeUnsupportedOperation {
		t.Fatalf("SubscribeToTask on a finished task: %+v", sub)
	}

	resp := a2atest.Do(t, url, "GetTask", map[string]any{"id": id})
	resp.Body.Close()
	// Without A2A-Version: parse errors first, then the version, which
	// a query parameter may give instead of the header.
	for _, tc := range []struct{ query, body, want string }{
		{"", `{`, "-32700"},
		{"", `[]`, "-32600"},
		{"", `{"jsonrpc":"1.0","id":1,"method":"GetTask"}`, "-32600"},
		{"", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}`, "-32009"},
		{"?A2A-Version=1.0", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}`, "-32001"},
	} {
		r, err := http.Post(url+tc.query, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var got a2atest.Response
		json.NewDecoder(r.Body).Decode(&got)
		r.Body.Close()
		if got.Error == nil || strconv.Itoa(got.Error.Code) != tc.want {
			t.Errorf("%s: got %+v, want %s", tc.body, got.Error, tc.want)
		}
	}
}

// A task canceled while the agent works is canceled for good, and the
// agent's late answer does not change it.
func TestCancel(t *testing.T) {
	t.Parallel()
	f, agent := startW(t)
	p := agent.TaskOf(t, a2atest.Submit(t, f.url("w"), "m-1", "slow"))
	var canceled spec.Task
	a2atest.Post(t, f.url("w"), "CancelTask", map[string]any{"id": p.CorrelationID}).Decode(t, &canceled)
	if canceled.Status.State != spec.TaskStateCanceled {
		t.Fatalf("CancelTask: %s", canceled.Status.State)
	}
	if notice := agent.Next(t); notice.A2A.Message != nil {
		t.Fatalf("the agent's next message is not the cancel notice: %+v", notice)
	}
	agent.Say(t, p, map[string]any{"type": "plaintext_message", "text": "late"})
	var got spec.Task
	a2atest.Post(t, f.url("w"), "GetTask", map[string]any{"id": p.CorrelationID}).Decode(t, &got)
	if got.Status.State != spec.TaskStateCanceled {
		t.Fatalf("a late answer changed a canceled task to %s", got.Status.State)
	}
}

// ListTasks pages through the caller's tasks, each once, most recently
// updated first (§3.1.4): an answer moves the oldest task to the front.
func TestListTasksPages(t *testing.T) {
	t.Parallel()
	f, agent := startW(t)
	var ids []spec.TaskID
	for i := range 5 {
		ids = append(ids, a2atest.Submit(t, f.url("w"), "m-"+strconv.Itoa(i), "x").ID)
	}
	var oldest a2a.Payload
	for range ids {
		if p := agent.Next(t); p.A2A.TaskID == ids[0] {
			oldest = p
		}
	}
	for _, id := range ids {
		a2atest.AwaitState(t, f.url("w"), id, spec.TaskStateWorking)
	}
	agent.Say(t, oldest, map[string]any{"type": "plaintext_message", "text": "first done"})

	var seen []*spec.Task
	token := ""
	for pages := 0; ; pages++ {
		if pages == 3 {
			t.Fatal("more than 3 pages of 2 for 5 tasks")
		}
		var page spec.ListTasksResponse
		a2atest.Post(t, f.url("w"), "ListTasks", map[string]any{"pageSize": 2, "pageToken": token}).Decode(t, &page)
		if page.TotalSize != 5 {
			t.Fatalf("totalSize %d", page.TotalSize)
		}
		seen = append(seen, page.Tasks...)
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if len(seen) != 5 || seen[0].ID != ids[0] {
		t.Fatalf("listed %d tasks, first %s; want 5, the answered %s first", len(seen), seen[0].ID, ids[0])
	}
	once := map[spec.TaskID]bool{}
	for i, task := range seen {
		if once[task.ID] {
			t.Fatalf("task %s listed twice", task.ID)
		}
		once[task.ID] = true
		if i > 0 && task.Status.Timestamp.After(*seen[i-1].Status.Timestamp) {
			t.Fatalf("task %d updated at %v, after the one before it (%v)", i, task.Status.Timestamp, seen[i-1].Status.Timestamp)
		}
	}
}

// With a Caller, the JSON-RPC door wants a credential and the card says
// so; the card itself stays public.
func TestBearerRequired(t *testing.T) {
	t.Parallel()
	f := start(t, a2a.Agent{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"})
	f.close()
	f.opts.Caller = func(r *http.Request, _ *a2a.Agent) (string, error) {
		if r.Header.Get("Authorization") != "Bearer good" {
			return "", a2a.ErrUnauthenticated
		}
		return "alice", nil
	}
	f.open(t)
	resp := a2atest.Do(t, f.url("w"), "GetTask", map[string]any{"id": "x"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("without a token: HTTP %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	a2atest.Post(t, f.url("w"), "GetTask", map[string]any{"id": "x"}, "Authorization", "Bearer good").WantCode(t, a2a.CodeTaskNotFound)
	card, err := agentcard.NewResolver(http.DefaultClient).Resolve(t.Context(), f.url("w"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := card.SecuritySchemes["bearer"]; !ok || len(card.SecurityRequirements) != 1 {
		t.Fatalf("card security: %+v %+v", card.SecuritySchemes, card.SecurityRequirements)
	}
	r, err := http.Get(f.http.URL + "/a2a/.well-known/agent-cards.json")
	if err != nil {
		t.Fatal(err)
	}
	var catalog struct{ Agents []json.RawMessage }
	json.NewDecoder(r.Body).Decode(&catalog)
	r.Body.Close()
	if len(catalog.Agents) != 1 {
		t.Fatalf("catalog: %d cards", len(catalog.Agents))
	}
}

// What the bus answers the publish settles a task nobody answers: no
// subscriber fails it, an agent's reject rejects it.
func TestBusOutcomes(t *testing.T) {
	t.Parallel()
	f := start(t,
		a2a.Agent{Name: "nobody", Topic: "tg:nobody", ClientID: "a2a-gw"},
		a2a.Agent{Name: "picky", Topic: "agent:picky", ClientID: "a2a-gw"})
	conn, err := peer.Dial(t.Context(), f.bus.URL, &peer.Options{ClientID: "picky", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Subscribe(t.Context(), "agent:picky", func(context.Context, *peer.Delivery) (peer.Result, error) {
		return peer.Result{Reject: true, Message: "not my kind of task"}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	failed := a2atest.AwaitState(t, f.url("nobody"), a2atest.Submit(t, f.url("nobody"), "m-1", "anyone?").ID, spec.TaskStateFailed)
	if text := failed.Status.Message.Parts[0].Text(); text != "no agent subscribes tg:nobody" {
		t.Errorf("failed with %q", text)
	}
	rejected := a2atest.AwaitState(t, f.url("picky"), a2atest.Submit(t, f.url("picky"), "m-1", "do it").ID, spec.TaskStateRejected)
	if text := rejected.Status.Message.Parts[0].Text(); !strings.Contains(text, "not my kind of task") {
		t.Errorf("rejected with %q", text)
	}
}

// A task's log is bounded: an answer past MaxEventsPerTask is rejected,
// so the bus dead-letters it, and the task keeps what it had.
func TestMaxEventsPerTask(t *testing.T) {
	t.Parallel()
	f := start(t, a2a.Agent{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"})
	f.close()
	f.opts.MaxEventsPerTask = 3
	f.open(t)
	agent := a2atest.StartAgent(t, f.bus.URL, "w", "", "agent:w")
	task := a2atest.Submit(t, f.url("w"), "m-1", "go")
	p := agent.TaskOf(t, task)
	a2atest.AwaitState(t, f.url("w"), task.ID, spec.TaskStateWorking) // events 1 and 2
	agent.Say(t, p, map[string]any{"type": "a2a_status", "state": "working", "text": "3"})
	res, err := agent.Conn.SendMessage(t.Context(), p.ReplyTo, map[string]any{"type": "a2a_status", "state": "working", "text": "4"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Acks) != 1 || res.Acks[0].DeadLetter == "" || !strings.Contains(res.Acks[0].Message, "MaxEventsPerTask") {
		t.Fatalf("the fourth event was not rejected: %+v", res)
	}
	evs := a2atest.OpenStream(t, f.url("w"), "SubscribeToTask", map[string]any{"id": task.ID}, "Last-Event-ID", "0")
	if ev, _ := evs.Next(t); ev.ID != 1 {
		t.Fatalf("first event %d", ev.ID)
	}
	evs.Close()
	var got spec.Task
	a2atest.Post(t, f.url("w"), "GetTask", map[string]any{"id": task.ID}).Decode(t, &got)
	if got.Status.Message.Parts[0].Text() != "3" {
		t.Fatalf("the task changed past its bound: %+v", got.Status)
	}
}

// An agent answers with the helpers: TaskOf reads the task from the
// delivery, SendArtifact and SendStatus answer it, and the client's
// stream carries each answer in order.
func TestAgentHelpers(t *testing.T) {
	t.Parallel()
	f := start(t, a2a.Agent{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"})
	conn := f.dialAgent(t, "w")
	err := conn.Subscribe(t.Context(), "agent:w", func(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
		p, ok := a2a.TaskOf(d)
		if !ok {
			return peer.Result{Message: "not an A2A task"}, nil
		}
		for i, text := range []string{"a", "b"} {
			art := &spec.Artifact{ID: "out", Parts: spec.ContentParts{spec.NewTextPart(text)}}
			if err := a2a.SendArtifact(ctx, d.Conn, p, art, i > 0, i == 1); err != nil {
				return peer.Result{}, err
			}
		}
		return peer.Result{Processed: true}, a2a.SendStatus(ctx, d.Conn, p, spec.TaskStateCompleted, "done: "+p.Text)
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs := a2atest.OpenStream(t, f.url("w"), "SendStreamingMessage", a2atest.UserMessage("m-1", "go")).All(t)
	var kinds []string
	for _, ev := range evs {
		switch e := ev.Decode(t).(type) {
		case *spec.Task:
			kinds = append(kinds, "task")
		case *spec.TaskArtifactUpdateEvent:
			kinds = append(kinds, "artifact:"+e.Artifact.Parts[0].Text())
		case *spec.TaskStatusUpdateEvent:
			kinds = append(kinds, string(e.Status.State))
		}
	}
	want := "task artifact:a artifact:b TASK_STATE_COMPLETED"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("stream: %s, want %s", got, want)
	}
	var task spec.Task
	a2atest.Post(t, f.url("w"), "GetTask", map[string]any{"id": evs[0].Decode(t).(*spec.Task).ID}).Decode(t, &task)
	if len(task.Artifacts) != 1 || len(task.Artifacts[0].Parts) != 2 || task.Status.Message.Parts[0].Text() != "done: go" {
		t.Fatalf("task: %+v", task)
	}
	gone := &a2a.Payload{ReplyTo: "outbound:a2a-gone", A2A: a2a.PayloadA2A{TaskID: "gone"}}
	if err := a2a.SendStatus(t.Context(), conn, gone, spec.TaskStateWorking, ""); !errors.Is(err, a2a.ErrAnswerRefused) {
		t.Fatalf("an answer to no task: %v", err)
	}
}

// Retries racing each other make one task and one bus message: the
// idempotency record is taken in the same transaction as the task.
func TestConcurrentRetries(t *testing.T) {
	t.Parallel()
	f, agent := startW(t)
	ids := make(chan spec.TaskID, 8)
	var wg sync.WaitGroup
	for range cap(ids) {
		wg.Go(func() {
			task, err := a2atest.TrySubmit(t.Context(), f.url("w"), "m-1", "once")
			if err != nil {
				t.Error(err)
				return
			}
			ids <- task.ID
		})
	}
	wg.Wait()
	close(ids)
	first := <-ids
	for id := range ids {
		if id != first {
			t.Fatalf("tasks %s and %s for one messageId", first, id)
		}
	}
	agent.Next(t)
	// A second message is the agent's next: the retries published nothing.
	second := a2atest.Submit(t, f.url("w"), "m-2", "next")
	if p := agent.Next(t); p.A2A.TaskID != second.ID {
		t.Fatalf("the agent's next message is of task %s, want %s: a retry was published", p.A2A.TaskID, second.ID)
	}
}

// A message the bus dead-letters after its retries fails its task: no
// answer will come.
func TestDeadLetterFailsTask(t *testing.T) {
	t.Parallel()
	f := startOn(t, &bus.Options{MaxAttempts: 2, RetryBaseDelay: time.Millisecond, RetryDelayCap: 10 * time.Millisecond},
		a2a.Agent{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"})
	conn := f.dialAgent(t, "w")
	err := conn.Subscribe(t.Context(), "agent:w", func(context.Context, *peer.Delivery) (peer.Result, error) {
		return peer.Result{ShouldRetry: true, RetryAfter: time.Millisecond, Message: "busy"}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	task := a2atest.Submit(t, f.url("w"), "m-1", "anyone?")
	failed := a2atest.AwaitState(t, f.url("w"), task.ID, spec.TaskStateFailed)
	if text := failed.Status.Message.Parts[0].Text(); !strings.Contains(text, "dead-lettered") {
		t.Fatalf("failed with %q", text)
	}
}
