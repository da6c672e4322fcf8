package bus_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// TestMethodTable: the methods a test bus serves (the core's and
// bus/admin's, which bustest wires as bub serve does), how (queued off the read
// loop or inline; in order behind cluster writes), who may call them (admin, before initialize), and
// that each is served, checked and counted as its one entry says; any
// other name, processMessage and near misses of real names included,
// answers -32601 and touches nothing.
func TestMethodTable(t *testing.T) {
	want := map[string]bus.MethodInfo{
		protocol.MethodInitialize:  {Open: true, InOrder: true},
		protocol.MethodPing:        {},
		protocol.MethodSubscribe:   {InOrder: true},
		protocol.MethodUnsubscribe: {InOrder: true},
		protocol.MethodSendMessage: {Queued: true},
		protocol.MethodDLQList:     {Queued: true, Admin: true},
		protocol.MethodDLQGet:      {Queued: true, Admin: true},
		protocol.MethodDLQReplay:   {Queued: true, Admin: true},
		protocol.MethodDLQPurge:    {Queued: true, Admin: true},

		protocol.MethodSubscriptionsList:   {Queued: true, Admin: true},
		protocol.MethodSubscriptionsRemove: {Queued: true, Admin: true},
		protocol.MethodSubscriptionsWaker:  {InOrder: true},
	}
	f := startAuth(t)
	require.Equal(t, want, bus.MethodTable(f.srv.Server))

	// One dead letter, which a stray purge would remove.
	_, err := f.srv.Store.DeadLetter("", &store.DeadLetter{Message: store.Message{ID: "m-1", Topic: "jobs:x"}, Reason: protocol.ReasonMaxRetries})
	require.NoError(t, err)

	fresh := bustest.DialToken(t, f.srv.URL, "main-token")
	user, _ := initialize(t, f.srv.URL, "main-token", "main", false)
	admin, _ := initialize(t, f.srv.URL, "ops-token", "ops-1", false)
	for name, m := range want {
		t.Run(name, func(t *testing.T) {
			if name == protocol.MethodInitialize {
				assert.EqualValues(t, protocol.CodeAlreadyInitialized, code(user.Call(name, protocol.InitializeParams{ClientID: "main"})))
				return
			}
			// Params that no method accepts, so that none changes
			// anything: the checks before the handler answer first.
			params := map[string]any{"id": 7}
			assert.EqualValues(t, protocol.CodeNotInitialized, code(fresh.Call(name, params)), "before initialize")
			got := code(user.Call(name, params))
			if m.Admin {
				assert.EqualValues(t, protocol.CodeForbidden, got, "without admin")
				got = code(admin.Call(name, params))
			}
			assert.NotContains(t, []int64{protocol.CodeMethodNotFound, protocol.CodeForbidden, protocol.CodeNotInitialized}, got, "served")
		})
	}
	for _, name := range []string{protocol.MethodProcessMessage, "dlq.", "dlq.purge ", "DLQ.PURGE", "dlq.delete", "Ping", ""} {
		for _, c := range []*bustest.Client{fresh, admin} {
			assert.EqualValues(t, protocol.CodeMethodNotFound, code(c.Call(name, map[string]any{})), "%q", name)
		}
	}
	n, err := f.srv.Store.CountDeadLetters()
	require.NoError(t, err)
	assert.Equal(t, 1, n, "no call purged the dead-letter queue")

	labels := map[string]bool{}
	for key := range series(t, f.srv.Registry(), "bub_requests_total") {
		labels[key[len("method="):strings.Index(key, ",")]] = true
	}
	for name := range want {
		assert.True(t, labels[name], "bub_requests_total counts %s by name", name)
	}
	assert.True(t, labels["unknown"])
	assert.Len(t, labels, len(want)+1, "no other method label: %v", labels)
}
