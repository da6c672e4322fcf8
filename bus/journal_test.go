package bus_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// journalPage GETs a page of the journal and decodes it.
func journalPage(t *testing.T, srv *bustest.Server, query string, header map[string]string) protocol.JournalPage {
	t.Helper()
	a := httpDo(t, srv, "GET", bus.PathEvents+"?"+query, "", header)
	if a.status != http.StatusOK {
		t.Fatalf("GET %s?%s: %d %s", bus.PathEvents, query, a.status, a.body)
	}
	var page protocol.JournalPage
	require.NoError(t, json.Unmarshal(a.body, &page))
	return page
}

// kinds lists the events as "kind" or "kind:detail", for comparing
// stories.
func kinds(events []protocol.JournalEvent) []string {
	var out []string
	for _, ev := range events {
		k := ev.Kind
		switch ev.Kind {
		case protocol.JournalDelivery:
			k += ":" + ev.ClientID + ":" + ev.Outcome
		case protocol.JournalRouted, protocol.JournalWoken:
			k += ":" + strings.Join(ev.Chain, ",") + ev.Reason
		case protocol.JournalDeadLettered, protocol.JournalReplayed:
			k += ":" + ev.Reason
		}
		out = append(out, k)
	}
	return out
}

// fetchPage GETs a page of the journal, for a condition of
// require.Eventually, which may not fail the test itself.
func fetchPage(srv *bustest.Server, query string) (protocol.JournalPage, error) {
	var page protocol.JournalPage
	res, err := http.Get(srv.HTTP.URL + bus.PathEvents + "?" + query)
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
		page, err := fetchPage(srv, "correlationId="+url.QueryEscape(id))
		if err != nil {
			return false
		}
		got.Store(&page.Events)
		return slices.Equal(kinds(page.Events), want)
	}, bustest.Timeout, 5*time.Millisecond)
	if !ok {
		t.Fatalf("story of %s:\n  %s\nwant\n  %s", id, strings.Join(kinds(*got.Load()), "\n  "), strings.Join(want, "\n  "))
	}
	return *got.Load()
}

// TestJournalTellsAMessagesStory checks that the journal records a
// message from its acceptance through a failed delivery, its retry and
// the processed one, and the reply published with its id as
// meta.correlation_id, in order; and that payloads are left out.
func TestJournalTellsAMessagesStory(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{RetryBaseDelay: time.Millisecond, RetryDelayCap: time.Millisecond})
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
	srv := bustest.Start(t, &bus.Options{Journal: bus.JournalOptions{Payloads: true}})
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
	srv := bustest.Start(t, nil)
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
	req, err := http.NewRequestWithContext(ctx, "GET", srv.HTTP.URL+bus.PathEventsStream+"?"+query, nil)
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
	httpSeen.m[fmt.Sprintf("%s get %d", bus.PathEventsStream, res.StatusCode)] = true
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
	srv := bustest.Start(t, nil)
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
		{"ok", bus.PathEvents + "?topic=jobs:*&limit=5", ops, 200, ""},
		{"no credential", bus.PathEvents, nil, 401, "credential"},
		{"wrong token", bus.PathEvents, bearerHeader("nope"), 401, "credential"},
		{"cross-site browser", bus.PathEvents, map[string]string{"Authorization": "Bearer ops-token", "Origin": "https://evil.example"}, 403, "Origin"},
		{"unknown parameter", bus.PathEvents + "?topics=x", ops, 400, "topics"},
		{"bad pattern", bus.PathEvents + "?topic=a%20b", ops, 400, "topic"},
		{"bad since", bus.PathEvents + "?since=yesterday", ops, 400, "since"},
		{"bad limit", bus.PathEvents + "?limit=0", ops, 400, "limit"},
		{"limit too big", bus.PathEvents + "?limit=1001", ops, 400, "limit"},
		{"bad cursor", bus.PathEvents + "?after=nope", ops, 400, "cursor"},
		{"another process's cursor", bus.PathEvents + "?after=x.99", ops, 200, ""},
		{"twice", bus.PathEvents + "?limit=1&limit=2", ops, 400, "once"},
		{"empty correlationId", bus.PathEvents + "?correlationId=", ops, 400, "correlationId"},
		{"stream, bad query", bus.PathEventsStream + "?since=-5m", ops, 400, "since"},
		{"stream, bad Last-Event-ID", bus.PathEventsStream, map[string]string{"Authorization": "Bearer ops-token", "Last-Event-ID": "zzz"}, 400, "Last-Event-ID"},
		{"stream, cross-site", bus.PathEventsStream, map[string]string{"Origin": "https://evil.example"}, 403, "Origin"},
		{"post", bus.PathEvents, ops, 405, "GET"},
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

	off := bustest.Start(t, &bus.Options{Journal: bus.JournalOptions{Off: true}})
	a := httpDo(t, off, "GET", bus.PathEvents, "", nil)
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
	a, err := auth.New(cfg, f.dir)
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

// TestJournalPerNodeInCluster checks what docs/PROTOCOL.md says a node's
// journal shows: a message published on node a to a subscriber on node b
// is in a's journal, named a, delivery included; b's shows nothing of it;
// the reply published on b is in b's journal, found by the original id.
func TestJournalPerNodeInCluster(t *testing.T) {
	nodes := bustest.StartCluster(t, nil, "a", "b")
	a, b := nodes[0], nodes[1]
	bustest.Connect(t, b.URL, "worker", bustest.Processed).Subscribe("jobs:*", protocol.PolicyContinueAll)
	pub := bustest.Connect(t, a.URL, "pub", nil)
	var id string
	require.Eventually(t, func() bool {
		// The subscription reaches a's order once the cluster applied it.
		r := pub.Publish("jobs:1", "t")
		id = r.MessageID
		return len(r.Acks) == 1 && r.Acks[0].Processed
	}, bustest.Timeout, 20*time.Millisecond)
	events := storyOf(t, a, id, []string{"accepted", "routed:worker", "delivery:worker:processed"})
	for _, ev := range events {
		require.Equal(t, "a", ev.Node)
	}
	reply := bustest.Connect(t, b.URL, "replier", nil)
	var r protocol.SendMessageResult
	reply.MustCall(protocol.MethodSendMessage, map[string]any{"topic": "outbound:x", "payload": map[string]any{"type": "t"},
		"meta": map[string]any{"correlation_id": id}}, &r)
	events = storyOf(t, b, id, []string{"accepted", "routed:no_subscribers"})
	require.Equal(t, r.MessageID, events[0].MessageID)
	require.Equal(t, "b", events[0].Node)

	// A cursor of node a reads on b as the start of b's journal.
	page := journalPage(t, b, "after="+url.QueryEscape(events[0].Cursor), nil)
	aPage := journalPage(t, a, "limit=1", nil)
	fromA := journalPage(t, b, "after="+url.QueryEscape(aPage.Next), nil)
	require.NotEmpty(t, fromA.Events)
	require.Equal(t, journalPage(t, b, "", nil).Events[0].Cursor, fromA.Events[0].Cursor)
	require.NotContains(t, kinds(page.Events), "accepted")
}

// TestJournalRecordsEachHTTPRequestsAddress checks that two HTTP
// publishes of one clientId, over two connections, are journaled each
// with its own address, though one publisher serves both.
func TestJournalRecordsEachHTTPRequestsAddress(t *testing.T) {
	srv := bustest.Start(t, nil)
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
