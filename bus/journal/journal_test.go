package journal_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/auth/authtest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/protocol"
)

// httpSeen records every path, method and status the journal answered
// in this package's tests, for TestJournalOpenAPI.
var httpSeen = struct {
	sync.Mutex
	m map[string]bool
}{m: map[string]bool{}}

// httpAnswer is an HTTP answer, read whole.
type httpAnswer struct {
	status int
	body   []byte
}

// messageID is the messageId of a 201 (bustest.Answer's).
func (a httpAnswer) messageID(t *testing.T) string {
	t.Helper()
	return bustest.Answer{Status: a.status, Body: a.body}.MessageID(t)
}

// httpDo sends a request to srv over real HTTP and records what path,
// method and status it got.
func httpDo(t *testing.T, srv *bustest.Server, method, target, body string, header map[string]string) httpAnswer {
	t.Helper()
	a := bustest.Do(t, method, srv.HTTP.URL+target, body, header)
	status, b := a.Status, a.Body
	path, _, _ := strings.Cut(target, "?")
	httpSeen.Lock()
	httpSeen.m[fmt.Sprintf("%s %s %d", path, strings.ToLower(method), status)] = true
	httpSeen.Unlock()
	return httpAnswer{status: status, body: b}
}

func bearerHeader(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// start starts a bus of o (nil: the defaults) with a journal of jo (nil:
// the defaults).
func start(t *testing.T, o *bus.Options, jo *journal.Options) *bustest.Server {
	t.Helper()
	var bo bus.Options
	if o != nil {
		bo = *o
	}
	bo.Extensions = append(slices.Clone(bo.Extensions), journal.New(jo))
	return bustest.Start(t, &bo)
}

// authConfig grants "main" its own agent topic and inbound:*, the
// "researcher" (reader-token) its own agent topic, "ops" admin, and
// "tool" publishing only.
func authConfig() auth.Config {
	return auth.Config{Identities: []auth.Identity{
		{Name: "main", TokenSHA256: authtest.SHA256("main-token"), Grant: auth.Grant{
			ClientIDs: []string{"main"},
			Publish:   auth.Rules{Allow: []string{"outbound:*", "agent:*"}},
			Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}", "inbound:*"}},
		}},
		{Name: "researcher", TokenSHA256: authtest.SHA256("reader-token"), Grant: auth.Grant{
			ClientIDs: []string{"researcher"},
			Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}},
		}},
		{Name: "ops", TokenSHA256: authtest.SHA256("ops-token"), Grant: auth.Grant{
			ClientIDs: []string{"ops-*"},
			Publish:   auth.Rules{Allow: []string{"inbound:*"}},
			Admin:     true,
		}},
		{Name: "tool", TokenSHA256: authtest.SHA256("tool-token"), Grant: auth.Grant{
			ClientIDs:   []string{"tool"},
			Publish:     auth.Rules{Allow: []string{"inbound:*"}},
			PublishOnly: true,
		}},
	}}
}

// authFixture is a bus with authConfig's auth and a journal.
type authFixture struct {
	srv    *bustest.Server
	config auth.Config
}

func startAuth(t *testing.T) *authFixture {
	t.Helper()
	cfg := authConfig()
	a, err := auth.New(cfg, t.TempDir())
	require.NoError(t, err)
	return &authFixture{srv: start(t, &bus.Options{Auth: a}, nil), config: cfg}
}

// TestJournalOpenAPI checks that every path, method and status of the
// journal the tests got is in /v1/openapi.json, and that every one the
// document lists for the journal was got. It runs the tests that get
// them, so it stands alone under -run.
func TestJournalOpenAPI(t *testing.T) {
	TestJournalStatuses(t)
	doc, err := os.ReadFile("../httpapi/openapi.json")
	require.NoError(t, err)
	httpSeen.Lock()
	defer httpSeen.Unlock()
	bustest.CheckOpenAPI(t, doc, httpSeen.m, func(path string) bool { return strings.HasPrefix(path, journal.PathEvents) })
}

// journalPage GETs a page of the journal and decodes it.
func journalPage(t *testing.T, srv *bustest.Server, query string, header map[string]string) protocol.JournalPage {
	t.Helper()
	a := httpDo(t, srv, "GET", journal.PathEvents+"?"+query, "", header)
	if a.status != http.StatusOK {
		t.Fatalf("GET %s?%s: %d %s", journal.PathEvents, query, a.status, a.body)
	}
	var page protocol.JournalPage
	require.NoError(t, json.Unmarshal(a.body, &page))
	return page
}

// fetchPage GETs a page of the journal, with token unless empty, for a
// condition of require.Eventually, which may not fail the test itself.
func fetchPage(srv *bustest.Server, query, token string) (protocol.JournalPage, error) {
	var page protocol.JournalPage
	req, err := http.NewRequest(http.MethodGet, srv.HTTP.URL+journal.PathEvents+"?"+query, nil)
	if err != nil {
		return page, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return page, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return page, fmt.Errorf("status %d", res.StatusCode)
	}
	return page, json.NewDecoder(res.Body).Decode(&page)
}

// storyOf waits until the journal of an open bus tells id's story as
// want (kinds) and returns its events.
func storyOf(t *testing.T, srv *bustest.Server, id string, want []string) []protocol.JournalEvent {
	t.Helper()
	var got atomic.Pointer[[]protocol.JournalEvent]
	got.Store(new([]protocol.JournalEvent))
	ok := assert.Eventually(t, func() bool {
		page, err := fetchPage(srv, "correlationId="+url.QueryEscape(id), "")
		if err != nil {
			return false
		}
		got.Store(&page.Events)
		return slices.Equal(bustest.JournalKinds(page.Events), want)
	}, bustest.Timeout, 5*time.Millisecond)
	if !ok {
		t.Fatalf("story of %s:\n  %s\nwant\n  %s", id, strings.Join(bustest.JournalKinds(*got.Load()), "\n  "), strings.Join(want, "\n  "))
	}
	return *got.Load()
}

// TestJournalTellsAMessagesStory checks that the journal records a
// message from its acceptance through a failed delivery, its retry and
// the processed one, and the reply published with its id as
// meta.correlation_id, in order; and that payloads are left out.
func TestJournalTellsAMessagesStory(t *testing.T) {
	srv := start(t, &bus.Options{RetryBaseDelay: time.Millisecond, RetryDelayCap: time.Millisecond}, nil)
	var calls atomic.Int32
	bustest.Connect(t, srv.URL, "worker", func(p protocol.ProcessMessageParams) any {
		if calls.Add(1) == 1 {
			return protocol.ProcessMessageResult{ShouldRetry: true}
		}
		return protocol.ProcessMessageResult{Processed: true}
	}).Subscribe("jobs:*", protocol.PolicyContinueAll)

	a := httpDo(t, srv, "POST", "/v1/messages", `{"topic":"jobs:a","payload":{"type":"secret-payload"}}`, nil)
	require.Equal(t, 201, a.status, string(a.body))
	id := a.messageID(t)
	storyOf(t, srv, id, []string{
		"accepted", "routed:worker", "delivery:worker:not_processed", "retry_scheduled", "delivery:worker:processed",
	})

	// The worker's reply names the message it answers.
	pub := bustest.Dial(t, srv.URL)
	pub.Initialize("worker-reply")
	var reply protocol.SendMessageResult
	pub.MustCall(protocol.MethodSendMessage, map[string]any{"topic": "outbound:chat", "payload": map[string]any{"type": "answer"},
		"meta": map[string]any{"correlation_id": id}}, &reply)
	events := storyOf(t, srv, id, []string{
		"accepted", "routed:worker", "delivery:worker:not_processed", "retry_scheduled", "delivery:worker:processed",
		"accepted", "routed:no_subscribers",
	})
	first, answer := events[0], events[5]
	require.Equal(t, "http", first.API)
	require.Equal(t, "http", first.From)
	require.NotEmpty(t, first.Remote)
	require.Equal(t, reply.MessageID, answer.MessageID)
	require.Equal(t, id, answer.CorrelationID)
	require.Equal(t, "websocket", answer.API)
	require.Equal(t, "worker-reply", answer.From)
	require.Equal(t, 2, events[4].Attempt)
	require.False(t, events[3].NextAt.IsZero(), "retry_scheduled says when")
	for _, ev := range events {
		require.Empty(t, ev.Payload, "payloads are not journaled without --journal-payloads")
	}
	for i := 1; i < len(events); i++ {
		require.False(t, events[i].Time.Before(events[i-1].Time), "events in order")
	}
}

// TestJournalHoldDeadLetterReplayPurge checks the events of a held
// message woken by a subscriber that rejects it, its dead letter, its
// replay and its purge.
func TestJournalHoldDeadLetterReplayPurge(t *testing.T) {
	srv := start(t, nil, &journal.Options{Payloads: true})
	pub := bustest.Dial(t, srv.URL)
	pub.Initialize("pub")
	id := pub.Publish("agent:x", "task").MessageID
	storyOf(t, srv, id, []string{"accepted", "held"})
	require.JSONEq(t, `{"type":"task"}`, string(journalPage(t, srv, "correlationId="+id, nil).Events[0].Payload), "--journal-payloads")

	bustest.Connect(t, srv.URL, "agent-x", func(protocol.ProcessMessageParams) any {
		return protocol.ProcessMessageResult{Reject: true, Message: "not mine"}
	}).Subscribe("agent:x", protocol.PolicyContinueAll)
	events := storyOf(t, srv, id, []string{"accepted", "held", "woken:agent-x", "delivery:agent-x:rejected", "dead_lettered:rejected"})
	dl := events[4].DeadLetterID
	require.NotEmpty(t, dl)

	admin := bustest.Dial(t, srv.URL)
	admin.Initialize("admin")
	var replayed protocol.DLQReplayResult
	admin.MustCall(protocol.MethodDLQReplay, protocol.DLQReplayParams{IDs: []string{dl}, To: protocol.ReplayToSubscriber}, &replayed)
	events = storyOf(t, srv, id, []string{"accepted", "held", "woken:agent-x", "delivery:agent-x:rejected", "dead_lettered:rejected",
		"replayed:subscriber", "delivery:agent-x:rejected", "dead_lettered:rejected"})
	again := events[7].DeadLetterID
	var purged protocol.DLQPurgeResult
	admin.MustCall(protocol.MethodDLQPurge, protocol.DLQPurgeParams{All: true}, &purged)
	require.Equal(t, 1, purged.Purged)
	events = storyOf(t, srv, id, []string{"accepted", "held", "woken:agent-x", "delivery:agent-x:rejected", "dead_lettered:rejected",
		"replayed:subscriber", "delivery:agent-x:rejected", "dead_lettered:rejected", "purged"})
	require.Equal(t, again, events[8].DeadLetterID)
}

// TestJournalPages checks that following next page by page, with a
// topic filter, gives every matching event once, in order, and that the
// query's other filters hold.
func TestJournalPages(t *testing.T) {
	srv := start(t, nil, nil)
	pub := bustest.Dial(t, srv.URL)
	pub.Initialize("pub")
	var ids []string
	for i := range 10 {
		ids = append(ids, pub.Publish(fmt.Sprintf("jobs:%d", i), "t").MessageID)
		pub.Publish("other:x", "t")
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 20, "paging ends")
		q := "topic=jobs:*&limit=3"
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		page := journalPage(t, srv, q, nil)
		require.LessOrEqual(t, len(page.Events), 3)
		for _, ev := range page.Events {
			require.True(t, strings.HasPrefix(ev.Topic, "jobs:"), ev.Topic)
			if ev.Kind == protocol.JournalAccepted {
				got = append(got, ev.MessageID)
			}
		}
		after = page.Next
		if !page.More {
			break
		}
	}
	require.Equal(t, ids, got)
	// Nothing new after the last page; since in the future finds nothing.
	require.Empty(t, journalPage(t, srv, "after="+url.QueryEscape(after), nil).Events)
	require.Empty(t, journalPage(t, srv, "since="+url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), nil).Events)
	require.Len(t, journalPage(t, srv, "since=1h&topic=other:x&limit=1000", nil).Events, 20)
}

// sseEvent is one event read from a stream.
type sseEvent struct {
	id string
	ev protocol.JournalEvent
}

// openStream opens the journal's stream over real HTTP and returns its
// events as they come; lastID, if set, is sent as Last-Event-ID. The
// stream is closed by cancel or when the test ends.
func openStream(t *testing.T, srv *bustest.Server, query, lastID string, header map[string]string) (<-chan sseEvent, int, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", srv.HTTP.URL+journal.PathEventsStream+"?"+query, nil)
	require.NoError(t, err)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	httpSeen.Lock()
	httpSeen.m[fmt.Sprintf("%s get %d", journal.PathEventsStream, res.StatusCode)] = true
	httpSeen.Unlock()
	out := make(chan sseEvent, 1024)
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		close(out)
		return out, res.StatusCode, cancel
	}
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	go func() {
		defer close(out)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.ev) != nil {
					return
				}
			case line == "" && cur.id != "":
				out <- cur
				cur = sseEvent{}
			}
		}
	}()
	return out, res.StatusCode, cancel
}

// next reads the stream's next event, failing the test after
// bustest.Timeout.
func next(t *testing.T, events <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-events:
		require.True(t, ok, "stream ended")
		return ev
	case <-time.After(bustest.Timeout):
		t.Fatal("no event on the stream")
	}
	return sseEvent{}
}

// TestJournalStreamResumes checks that a stream reader that goes away
// and reconnects with Last-Event-ID gets every event it missed, once, in
// order, and then the new ones as they happen.
func TestJournalStreamResumes(t *testing.T) {
	srv := start(t, nil, nil)
	pub := bustest.Dial(t, srv.URL)
	pub.Initialize("pub")
	events, status, stop := openStream(t, srv, "topic=jobs:*", "", nil)
	require.Equal(t, 200, status)
	first := pub.Publish("jobs:1", "t").MessageID
	pub.Publish("other:1", "t")
	ev := next(t, events)
	require.Equal(t, first, ev.ev.MessageID)
	require.Equal(t, protocol.JournalAccepted, ev.ev.Kind)
	require.Equal(t, ev.id, ev.ev.Cursor)
	lastID := ev.id
	stop()

	// Published while nobody reads.
	var missed []string
	for i := range 5 {
		missed = append(missed, pub.Publish(fmt.Sprintf("jobs:%d", i+2), "t").MessageID)
	}
	events, status, _ = openStream(t, srv, "topic=jobs:*", lastID, nil)
	require.Equal(t, 200, status)
	ev = next(t, events)
	require.Equal(t, first, ev.ev.MessageID, "the rest of the first message's story")
	require.Equal(t, protocol.JournalRouted, ev.ev.Kind)
	for _, id := range missed {
		for _, kind := range []string{protocol.JournalAccepted, protocol.JournalRouted} {
			ev = next(t, events)
			require.Equal(t, id, ev.ev.MessageID)
			require.Equal(t, kind, ev.ev.Kind)
		}
	}
	live := pub.Publish("jobs:live", "t").MessageID
	require.Equal(t, live, next(t, events).ev.MessageID)

	// A cursor of another process reads as the start of this one's.
	events, status, _ = openStream(t, srv, "topic=jobs:*", "0123456789ab.7", nil)
	require.Equal(t, 200, status)
	require.Equal(t, first, next(t, events).ev.MessageID)
}

// TestJournalObeysGrants checks that a reader sees the events of the
// topics its grant lets it subscribe to, an admin all, a credential
// that may subscribe to nothing none, in pages and on the stream.
func TestJournalObeysGrants(t *testing.T) {
	f := startAuth(t)
	srv := f.srv
	main := bustest.DialToken(t, srv.URL, "main-token")
	main.Initialize("main")
	agentMsg := main.Publish("agent:main", "t").MessageID
	agentOther := main.Publish("agent:other", "t").MessageID
	tool := httpDo(t, srv, "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"}}`, bearerHeader("tool-token"))
	require.Equal(t, 201, tool.status)
	inbound := tool.messageID(t)

	messages := func(token string) []string {
		var ids []string
		for _, ev := range journalPage(t, srv, "", bearerHeader(token)).Events {
			if ev.Kind == protocol.JournalAccepted {
				ids = append(ids, ev.MessageID)
			}
		}
		return ids
	}
	require.Equal(t, []string{agentMsg, agentOther, inbound}, messages("ops-token"), "admin sees all")
	require.Equal(t, []string{agentMsg, inbound}, messages("main-token"), "agent:main and inbound:*")
	require.Empty(t, messages("reader-token"), "agent:researcher only")
	require.Empty(t, messages("tool-token"), "publish only")
	require.Empty(t, journalPage(t, srv, "correlationId="+agentOther, bearerHeader("main-token")).Events)

	events, status, _ := openStream(t, srv, "since=1h", "", bearerHeader("main-token"))
	require.Equal(t, 200, status)
	for _, ev := range []sseEvent{next(t, events), next(t, events), next(t, events), next(t, events)} {
		require.Contains(t, []string{agentMsg, inbound}, ev.ev.MessageID)
	}
	_, status, _ = openStream(t, srv, "", "", bearerHeader("nope"))
	require.Equal(t, 401, status)
}

// TestJournalStatuses checks the journal's refusals: each names what is
// wrong, with the status the OpenAPI document gives.
func TestJournalStatuses(t *testing.T) {
	f := startAuth(t)
	ops := bearerHeader("ops-token")
	tests := []struct {
		name, target string
		header       map[string]string
		status       int
		says         string
	}{
		{"ok", journal.PathEvents + "?topic=jobs:*&limit=5", ops, 200, ""},
		{"no credential", journal.PathEvents, nil, 401, "credential"},
		{"wrong token", journal.PathEvents, bearerHeader("nope"), 401, "credential"},
		{"cross-site browser", journal.PathEvents, map[string]string{"Authorization": "Bearer ops-token", "Origin": "https://evil.example"}, 403, "Origin"},
		{"unknown parameter", journal.PathEvents + "?topics=x", ops, 400, "topics"},
		{"bad pattern", journal.PathEvents + "?topic=a%20b", ops, 400, "topic"},
		{"bad since", journal.PathEvents + "?since=yesterday", ops, 400, "since"},
		{"bad limit", journal.PathEvents + "?limit=0", ops, 400, "limit"},
		{"limit too big", journal.PathEvents + "?limit=1001", ops, 400, "limit"},
		{"bad cursor", journal.PathEvents + "?after=nope", ops, 400, "cursor"},
		{"another process's cursor", journal.PathEvents + "?after=x.99", ops, 200, ""},
		{"twice", journal.PathEvents + "?limit=1&limit=2", ops, 400, "once"},
		{"empty correlationId", journal.PathEvents + "?correlationId=", ops, 400, "correlationId"},
		{"stream, bad query", journal.PathEventsStream + "?since=-5m", ops, 400, "since"},
		{"stream, bad Last-Event-ID", journal.PathEventsStream, map[string]string{"Authorization": "Bearer ops-token", "Last-Event-ID": "zzz"}, 400, "Last-Event-ID"},
		{"stream, cross-site", journal.PathEventsStream, map[string]string{"Origin": "https://evil.example"}, 403, "Origin"},
		{"post", journal.PathEvents, ops, 405, "GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := "GET"
			if tt.status == 405 {
				method = "POST"
			}
			a := httpDo(t, f.srv, method, tt.target, "", tt.header)
			require.Equal(t, tt.status, a.status, string(a.body))
			require.Contains(t, string(a.body), tt.says)
		})
	}
	_, status, _ := openStream(t, f.srv, "", "", nil)
	require.Equal(t, 401, status)
	_, status, stop := openStream(t, f.srv, "", "", ops)
	require.Equal(t, 200, status)
	stop()

	off := start(t, nil, &journal.Options{Off: true})
	a := httpDo(t, off, "GET", journal.PathEvents, "", nil)
	require.Equal(t, 404, a.status)
	require.Contains(t, string(a.body), "journal is off")
	_, status, _ = openStream(t, off, "", "", nil)
	require.Equal(t, 404, status)
}

// TestJournalStreamEndsWhenCredentialRevoked checks that a reload that
// no longer accepts a stream reader's credential ends its stream at the
// next event, showing it nothing more.
func TestJournalStreamEndsWhenCredentialRevoked(t *testing.T) {
	f := startAuth(t)
	events, status, _ := openStream(t, f.srv, "", "", bearerHeader("main-token"))
	require.Equal(t, 200, status)
	cfg := f.config
	cfg.Identities = slices.DeleteFunc(slices.Clone(cfg.Identities), func(id auth.Identity) bool { return id.Name == "main" })
	a, err := auth.New(cfg, t.TempDir())
	require.NoError(t, err)
	f.srv.SetAuth(a)
	ops := httpDo(t, f.srv, "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"},"clientId":"ops-1"}`, bearerHeader("ops-token"))
	require.Equal(t, 201, ops.status)
	select {
	case ev, ok := <-events:
		require.False(t, ok, "the stream showed %+v after its credential was revoked", ev.ev)
	case <-time.After(bustest.Timeout):
		t.Fatal("the stream did not end")
	}
}

// eventKeys names each event by its node and cursor, which no other
// event shares.
func eventKeys(events []protocol.JournalEvent) []string {
	var out []string
	for _, ev := range events {
		out = append(out, ev.Node+" "+ev.Cursor)
	}
	return out
}

// TestJournalWholeClusterFromAnyNode checks docs/PROTOCOL.md's journal of
// a cluster: a message published on node a, delivered to a subscriber on
// node b, and the reply published on b (held: agent:* holds), are one timeline read from node
// c, each event naming its node; paging from c with a small limit walks
// the three nodes' events in time order, each once; a reader without
// admin sees only its grant's topics on every node; and once a node
// stops, the next page names it missing rather than failing.
func TestJournalWholeClusterFromAnyNode(t *testing.T) {
	authn, err := auth.New(authConfig(), t.TempDir())
	require.NoError(t, err)
	nodes := clustertest.StartExtended(t, &bus.Options{Auth: authn}, func(string) []bus.Extension {
		return []bus.Extension{journal.New(nil)}
	}, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]

	worker := bustest.DialToken(t, b.URL, "main-token")
	worker.OnProcess(bustest.Processed)
	worker.Initialize("main")
	worker.Subscribe("inbound:*", protocol.PolicyContinueAll)
	opsA := bustest.DialToken(t, a.URL, "ops-token")
	opsA.Initialize("ops-a")
	opsC := bustest.DialToken(t, c.URL, "ops-token")
	opsC.Initialize("ops-c")
	var id string
	require.Eventually(t, func() bool {
		r := opsA.Publish("inbound:x", "t")
		id = r.MessageID
		return len(r.Acks) == 1 && r.Acks[0].Processed
	}, bustest.Timeout, 20*time.Millisecond)
	var reply, hidden protocol.SendMessageResult
	worker.MustCall(protocol.MethodSendMessage, map[string]any{"topic": "agent:main", "payload": map[string]any{"type": "t"},
		"meta": map[string]any{"correlation_id": id}}, &reply)
	worker.MustCall(protocol.MethodSendMessage, map[string]any{"topic": "agent:other", "payload": map[string]any{"type": "t"}}, &hidden)
	fromC := opsC.Publish("inbound:y", "t").MessageID

	want := []string{"a accepted", "a routed:main", "a delivery:main:processed", "b accepted", "b held"}
	var got []string
	ok := assert.Eventually(t, func() bool {
		page, err := fetchPage(c, "correlationId="+url.QueryEscape(id), "ops-token")
		if err != nil {
			return false
		}
		got = nil
		for i, k := range bustest.JournalKinds(page.Events) {
			got = append(got, page.Events[i].Node+" "+k)
		}
		return slices.Equal(got, want) && page.Events[3].MessageID == reply.MessageID
	}, bustest.Timeout, 10*time.Millisecond)
	require.True(t, ok, "timeline from c:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))

	// The whole journal in one page, then in pages of two.
	var whole protocol.JournalPage
	require.Eventually(t, func() bool {
		whole, err = fetchPage(c, "limit=1000", "ops-token")
		return err == nil && slices.ContainsFunc(whole.Events, func(ev protocol.JournalEvent) bool {
			return ev.MessageID == fromC && ev.Kind == protocol.JournalDelivery
		})
	}, bustest.Timeout, 10*time.Millisecond)
	require.Empty(t, whole.Missing)
	require.False(t, whole.More)
	var paged []protocol.JournalEvent
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, len(whole.Events), "paging does not end")
		page := journalPage(t, c, "limit=2&after="+url.QueryEscape(cursor), bearerHeader("ops-token"))
		require.LessOrEqual(t, len(page.Events), 2)
		paged = append(paged, page.Events...)
		cursor = page.Next
		if !page.More {
			break
		}
	}
	require.Equal(t, eventKeys(whole.Events), eventKeys(paged))
	seen := map[string]bool{}
	for i, ev := range paged {
		seen[ev.Node] = true
		if i > 0 {
			require.False(t, ev.Time.Before(paged[i-1].Time), "event %d of %s before the one before it", i, ev.Node)
		}
	}
	require.Equal(t, map[string]bool{"a": true, "b": true, "c": true}, seen)
	require.Contains(t, cursor, "a:")
	require.Contains(t, cursor, "c:")

	// main may subscribe to inbound:* and agent:main, not agent:other:
	// no node shows it that message.
	visible := map[string]bool{}
	for _, ev := range journalPage(t, c, "limit=1000", bearerHeader("main-token")).Events {
		visible[ev.MessageID] = true
		require.True(t, strings.HasPrefix(ev.Topic, "inbound:") || ev.Topic == "agent:main", "main sees %s on node %s", ev.Topic, ev.Node)
	}
	require.True(t, visible[id] && visible[reply.MessageID] && visible[fromC], "main sees %v", visible)
	require.False(t, visible[hidden.MessageID])
	require.Empty(t, journalPage(t, a, "messageId="+hidden.MessageID, bearerHeader("main-token")).Events)
	require.NotEmpty(t, journalPage(t, a, "messageId="+hidden.MessageID, bearerHeader("ops-token")).Events)

	// Node a stops: the next page from where paging ended names it.
	a.Stop(clustertest.Timeout)
	page := journalPage(t, c, "after="+url.QueryEscape(cursor), bearerHeader("ops-token"))
	require.Equal(t, []string{"a"}, page.Missing)
	require.Contains(t, page.Next, "a:", "a's place is kept for when it answers again")
	page = journalPage(t, b, "messageId="+url.QueryEscape(reply.MessageID), bearerHeader("ops-token"))
	require.Len(t, page.Events, 2, "b's own events are there without a")
}

// TestJournalRecordsEachHTTPRequestsAddress checks that two HTTP
// publishes of one clientId, over two connections, are journaled each
// with its own address, though one publisher serves both.
func TestJournalRecordsEachHTTPRequestsAddress(t *testing.T) {
	srv := start(t, nil, nil)
	var ids []string
	for range 2 {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		res, err := client.Post(srv.HTTP.URL+"/v1/messages", "application/json", strings.NewReader(`{"topic":"jobs:a","payload":{"type":"t"}}`))
		require.NoError(t, err)
		var a struct{ MessageID string }
		require.NoError(t, json.NewDecoder(res.Body).Decode(&a))
		res.Body.Close()
		ids = append(ids, a.MessageID)
	}
	first := journalPage(t, srv, "correlationId="+ids[0], nil).Events[0]
	second := journalPage(t, srv, "correlationId="+ids[1], nil).Events[0]
	require.Equal(t, protocol.JournalAccepted, first.Kind)
	require.NotEqual(t, first.Remote, second.Remote, "each request's own address")
}
