package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/admin"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// fastRetries gives up on a message after maxAttempts quick attempts.
func fastRetries(maxAttempts int) *bus.Options {
	return &bus.Options{MaxAttempts: maxAttempts, RetryBaseDelay: 20 * time.Millisecond, RetryDelayCap: 200 * time.Millisecond, DeliveryTimeout: 500 * time.Millisecond}
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bustest.Timeout):
		t.Fatal("nothing received")
	}
	var zero T
	return zero
}

func dlqList(t *testing.T, c *bustest.Client, params protocol.DLQListParams) protocol.DLQListResult {
	t.Helper()
	var r protocol.DLQListResult
	c.MustCall(protocol.MethodDLQList, params, &r)
	return r
}

// deadLetters fills the queue with n entries on topic by publishing to a
// subscriber that always asks for a retry, with one attempt allowed.
func deadLetters(t *testing.T, srv *bustest.Server, pub *bustest.Client, topic string, n int) {
	t.Helper()
	for range n {
		r := pub.Publish(topic, "t")
		require.False(t, r.Acks[0].Retrying)
	}
}

// TestAdminMethods: the dlq.* methods list, get, replay and purge the
// dead-letter queue (bustest wires the add-on as bub serve does).
func TestAdminMethods(t *testing.T) {
	srv := bustest.Start(t, fastRetries(1))
	var mode atomic.Value
	mode.Store("retry")
	seen := make(chan protocol.ProcessMessageParams, 100)
	sub := bustest.Connect(t, srv.URL, "sub", func(p protocol.ProcessMessageParams) any {
		if mode.Load() == "retry" {
			return protocol.ProcessMessageResult{ShouldRetry: true}
		}
		seen <- p
		return protocol.ProcessMessageResult{Processed: true}
	})
	sub.Subscribe("a:*", "")
	sub.Subscribe("b:*", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	deadLetters(t, srv, pub, "a:1", 5)
	deadLetters(t, srv, pub, "b:1", 3)

	t.Run("list pages and filters", func(t *testing.T) {
		page := dlqList(t, pub, protocol.DLQListParams{Limit: 3})
		require.Len(t, page.Entries, 3)
		require.NotEmpty(t, page.NextCursor)
		var all []protocol.DeadLetter
		all = append(all, page.Entries...)
		for page.NextCursor != "" {
			page = dlqList(t, pub, protocol.DLQListParams{Limit: 3, Cursor: page.NextCursor})
			all = append(all, page.Entries...)
		}
		assert.Len(t, all, 8)
		assert.Len(t, dlqList(t, pub, protocol.DLQListParams{DLQFilter: protocol.DLQFilter{Topic: "b:*"}}).Entries, 3)
		assert.Len(t, dlqList(t, pub, protocol.DLQListParams{DLQFilter: protocol.DLQFilter{Reason: protocol.ReasonMaxRetries}}).Entries, 8)
		assert.Empty(t, dlqList(t, pub, protocol.DLQListParams{DLQFilter: protocol.DLQFilter{Since: time.Now().Add(time.Hour)}}).Entries)
		r := pub.Call(protocol.MethodDLQList, map[string]any{"reason": "bored"})
		require.NotNil(t, r.Error)
		assert.Equal(t, int64(protocol.CodeInvalidParams), r.Error.Code)
	})
	entries := dlqList(t, pub, protocol.DLQListParams{}).Entries

	t.Run("get", func(t *testing.T) {
		var d protocol.DeadLetter
		pub.MustCall(protocol.MethodDLQGet, protocol.DLQGetParams{ID: entries[0].ID}, &d)
		assert.Equal(t, entries[0].MessageID, d.MessageID)
		r := pub.Call(protocol.MethodDLQGet, protocol.DLQGetParams{ID: "d-999999"})
		require.NotNil(t, r.Error)
		assert.Equal(t, int64(protocol.CodeNotFound), r.Error.Code)
	})

	mode.Store("ok")
	t.Run("replay to topic", func(t *testing.T) {
		var r protocol.DLQReplayResult
		pub.MustCall(protocol.MethodDLQReplay, protocol.DLQReplayParams{IDs: []string{entries[0].ID, "d-999999"}}, &r)
		require.Len(t, r.Outcomes, 2)
		assert.True(t, r.Outcomes[0].Accepted)
		assert.True(t, r.Outcomes[0].Result.Success)
		assert.False(t, r.Outcomes[1].Accepted)
		assert.Contains(t, r.Outcomes[1].Error, "not found")
		assert.Equal(t, entries[0].MessageID, recv(t, seen).MessageID)
	})
	t.Run("replay to subscriber", func(t *testing.T) {
		var r protocol.DLQReplayResult
		pub.MustCall(protocol.MethodDLQReplay, protocol.DLQReplayParams{IDs: []string{entries[1].ID}, To: protocol.ReplayToSubscriber}, &r)
		assert.True(t, r.Outcomes[0].Accepted, r.Outcomes[0].Error)
		p := recv(t, seen)
		assert.Equal(t, entries[1].MessageID, p.MessageID)
		assert.Equal(t, "a:*", p.Subscription)
	})
	t.Run("replay with nobody subscribed keeps the entry", func(t *testing.T) {
		sub.MustCall(protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: "a:*"}, nil)
		var r protocol.DLQReplayResult
		pub.MustCall(protocol.MethodDLQReplay, protocol.DLQReplayParams{IDs: []string{entries[2].ID}}, &r)
		assert.False(t, r.Outcomes[0].Accepted)
		// accepted: false already says it was not replayed; the error
		// says why, once (the CLI prints "ID not replayed: ERROR").
		assert.Regexp(t, `^no subscriber for "a:[^"]*"; the entry stays$`, r.Outcomes[0].Error)
		var d protocol.DeadLetter
		pub.MustCall(protocol.MethodDLQGet, protocol.DLQGetParams{ID: entries[2].ID}, &d)
	})
	t.Run("purge", func(t *testing.T) {
		r := pub.Call(protocol.MethodDLQPurge, map[string]any{})
		require.NotNil(t, r.Error, "an empty purge is refused")
		// An id with a filter or all is refused, and purges nothing.
		before := len(dlqList(t, pub, protocol.DLQListParams{}).Entries)
		for _, p := range []protocol.DLQPurgeParams{
			{ID: entries[2].ID, All: true},
			{ID: entries[2].ID, DLQFilter: protocol.DLQFilter{Reason: "no_subscribers"}},
		} {
			r := pub.Call(protocol.MethodDLQPurge, p)
			require.NotNil(t, r.Error, "purge %+v", p)
			assert.EqualValues(t, protocol.CodeInvalidParams, r.Error.Code)
			assert.Contains(t, r.Error.Message, "not both")
		}
		require.Len(t, dlqList(t, pub, protocol.DLQListParams{}).Entries, before)
		var res protocol.DLQPurgeResult
		pub.MustCall(protocol.MethodDLQPurge, protocol.DLQPurgeParams{ID: entries[2].ID}, &res)
		assert.Equal(t, 1, res.Purged)
		pub.MustCall(protocol.MethodDLQPurge, protocol.DLQPurgeParams{DLQFilter: protocol.DLQFilter{Topic: "b:*"}}, &res)
		assert.Equal(t, 3, res.Purged)
		pub.MustCall(protocol.MethodDLQPurge, protocol.DLQPurgeParams{All: true}, &res)
		assert.Equal(t, 2, res.Purged)
		assert.Empty(t, dlqList(t, pub, protocol.DLQListParams{}).Entries)
	})
}

// TestWithoutAdmin: the administration is an add-on: a bus without it
// knows none of its methods and serves no backup.
func TestWithoutAdmin(t *testing.T) {
	srv, err := bus.New(&bus.Options{Logger: backupQuietLogger})
	require.NoError(t, err)
	defer srv.Shutdown(t.Context())
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := bustest.Dial(t, "ws"+strings.TrimPrefix(hs.URL, "http")+"/")
	c.Initialize("ops")
	for _, m := range []string{protocol.MethodDLQList, protocol.MethodDLQGet, protocol.MethodDLQReplay, protocol.MethodDLQPurge, protocol.MethodSubscriptionsList, protocol.MethodSubscriptionsRemove} {
		r := c.Call(m, map[string]any{})
		require.NotNil(t, r.Error, m)
		assert.EqualValues(t, protocol.CodeMethodNotFound, r.Error.Code, m)
	}
	resp, err := http.Get(hs.URL + admin.BackupPath)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}
