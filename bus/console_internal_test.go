package bus

import (
	"testing"

	"github.com/bub-bus/bub/bus/store"
)

// FuzzConsoleAgentEvent: whatever a peer publishes on system:agent.*, the
// console's book of agents takes it without panicking, and keeps at most
// one entry per agent, with a state it knows.
func FuzzConsoleAgentEvent(f *testing.F) {
	f.Add("system:agent.ready", []byte(`{"type":"agent_event","event":"ready","agent_id":"a","pid":3,"timestamp":"2026-01-01T00:00:00Z"}`))
	f.Add("system:agent.exited", []byte(`{"type":"agent_event","event":"exited","agent_id":"a","restarting":true}`))
	f.Add("system:agent.woken", []byte(`{"type":"agent_event","event":"nope","agent_id":""}`))
	f.Add("system:agent.x", []byte(`[1,2`))
	f.Fuzz(func(t *testing.T, topic string, payload []byte) {
		var b agentBook
		m := &store.Message{Topic: topic, Payload: payload, From: "spawner"}
		b.observe(m)
		b.observe(m)
		list := b.list()
		if len(list) > 1 {
			t.Fatalf("one event made %d agents", len(list))
		}
		for _, a := range list {
			switch a.State {
			case "starting", "running", "hibernated", "restarting", "exited", "failed":
			default:
				t.Fatalf("state %q", a.State)
			}
		}
	})
}
