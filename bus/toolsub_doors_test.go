package bus_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/bus/toolsub"
	"github.com/bub-bus/bub/protocol"
)

// The tool subscriptions' add-on (bus/toolsub) has its own tests; the
// core's take its callbacks as one of the bus's doors.

// withToolSubs adds the tool subscriptions' add-on to o with ts,
// keeping them in o's store, which it sets to an in-memory one when o
// has none.
func withToolSubs(o *bus.Options, ts toolsub.Options) {
	if o.Store == nil {
		o.Store = store.OpenMemory()
	}
	ts.Store = o.Store
	o.Extensions = append(o.Extensions, toolsub.New(&ts))
}

// toolCallbackStatuses gets, through httpDo, the answers of
// /v1/callbacks/{id} that openapi.json documents, for
// TestHTTPOpenAPIMatchesHandlers.
func toolCallbackStatuses(t *testing.T) {
	o := &bus.Options{MaxMessageBytes: 4096}
	withToolSubs(o, toolsub.Options{EventRate: 0.001, EventBurst: 1})
	srv := bustest.Start(t, o)
	bustest.Collect(t, srv.URL, "agent-1", "tg:1")
	agent := bustest.Connect(t, srv.URL, "agent-1b", bustest.Processed)
	var start protocol.ToolSubscriptionStartResult
	agent.MustCall(protocol.MethodToolSubscriptionStart, protocol.ToolSubscriptionStartParams{GroupID: "tg:1", ToolCallID: "c", Topic: "tg:1"}, &start)
	event := `{"type":"subscription_event","group_id":"tg:1","tool_call_id":"c","text":"t"}`
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{start.CallbackPath, event, 200},
		{start.CallbackPath, event, 429},
		{start.CallbackPath, `{"type":`, 400},
		{protocol.PathCallbacks + "guessed", event, 404},
		{start.CallbackPath, `"` + strings.Repeat("x", 5000) + `"`, 413},
	} {
		a := httpDo(t, srv, "POST", c.path, c.body, nil)
		require.Equal(t, c.status, a.status, string(a.body))
	}
}
