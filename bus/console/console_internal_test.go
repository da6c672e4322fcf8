package console

import (
	"fmt"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
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

// FuzzConsoleBCPEvent: whatever a peer publishes on system:bcp.*, the
// console's book of the gateway takes it without panicking, keeps one
// channel per Controller and Reader, and no string of it longer than
// maxBCPField.
func FuzzConsoleBCPEvent(f *testing.F) {
	f.Add(protocol.TopicBCPBudget, []byte(`{"type":"bcp_channel_budget","event":"charge","controller":"main","reader":"r","spent_bits":55,"remaining_bits":145,"budget_bits":200,"at":"2026-01-01T00:00:00Z"}`))
	f.Add(protocol.TopicBCPValidation, []byte(`{"type":"bcp_validation_failed","controller":"main","reader":"r","query_id":"q-1","category":2,"code":"too_many_words","attempts_left":2}`))
	f.Add(protocol.TopicBCPValidation, []byte(`{"type":"bcp_anomaly","controller":"main","reader":"r","anomalies":{"url":2,"invisible":1}}`))
	f.Add(protocol.TopicBCPBudget, []byte(`{"type":"bcp_channel_budget","controller":"","reader":"r"}`))
	f.Add(protocol.TopicBCPValidation, []byte(`[1,2`))
	f.Fuzz(func(t *testing.T, topic string, payload []byte) {
		var b bcpBook
		m := &store.Message{Topic: topic, Payload: payload, From: "bcp-gateway"}
		b.observe(m)
		b.observe(m)
		channels, recent := b.snapshot()
		if len(channels) > 1 || len(recent) > 2 {
			t.Fatalf("one event twice made %d channels and %d events", len(channels), len(recent))
		}
		clipped := func(ss ...string) bool {
			for _, s := range ss {
				if len(s) > maxBCPField {
					return false
				}
			}
			return true
		}
		for _, c := range channels {
			if !clipped(c.Controller, c.Reader, c.Event, c.At, c.From) || c.Controller == "" || c.Type != protocol.TypeBCPChannelBudget {
				t.Fatalf("channel %+v", c)
			}
		}
		for _, e := range recent {
			if len(e.Anomalies) > maxBCPKinds || !clipped(e.Controller, e.Reader, e.QueryID, e.SubscriptionID, e.Code, e.At, e.From) ||
				(e.Kind == "failure") != (e.Type == protocol.TypeBCPValidationFailed) || (e.Kind == "anomaly") != (e.Type == protocol.TypeBCPAnomaly) ||
				(e.Kind == "failure" && e.Anomalies != nil) {
				t.Fatalf("event %+v", e)
			}
			for k := range e.Anomalies {
				if !clipped(k) {
					t.Fatalf("anomaly kind of %d bytes", len(k))
				}
			}
		}
	})
}

// TestBCPBookForgetsTheLongestUnheard: past maxConsoleChannels, the
// channel forgotten is the one this node heard of longest ago, whatever
// its publisher wrote in at (which need not sort as time, or be one).
func TestBCPBookForgetsTheLongestUnheard(t *testing.T) {
	var b bcpBook
	budget := func(reader, at string) *store.Message {
		return &store.Message{Topic: protocol.TopicBCPBudget, From: "gw",
			Payload: []byte(`{"type":"bcp_channel_budget","controller":"main","reader":"` + reader + `","at":"` + at + `"}`)}
	}
	b.observe(budget("first", "9999"))
	for i := range maxConsoleChannels {
		b.observe(budget(fmt.Sprintf("r%d", i), "2026-01-01T00:00:00Z"))
	}
	channels, _ := b.snapshot()
	if len(channels) != maxConsoleChannels {
		t.Fatalf("%d channels kept, want %d", len(channels), maxConsoleChannels)
	}
	for _, c := range channels {
		if c.Reader == "first" {
			t.Fatal("the channel heard of first was kept, and a later one forgotten")
		}
	}
}

// TestConsoleFullTable: in a full table of sessions, a login without
// admin by an identity holding none is refused, not made room for by
// ending another identity's; an admin's login ends the oldest session
// without admin, never an admin's.
func TestConsoleFullTable(t *testing.T) {
	t.Parallel()
	var c sessions
	now := time.Now()
	add := func(identity string, admin bool, age time.Duration) *session {
		sess := &session{id: randomHex(8), identity: identity, expires: now.Add(time.Hour - age)}
		sess.admin.Store(admin)
		if err := c.addLocked(sess, admin); err != nil {
			t.Fatalf("add %s: %v", identity, err)
		}
		return sess
	}
	// The oldest session is the admin's.
	root := add("root", true, 3*time.Minute)
	oldestViewer := add("viewer-0", false, 2*time.Minute)
	for i := 1; len(c.all) < maxConsoleSessions; i++ {
		add(fmt.Sprint("viewer-", i/maxConsoleSessionsPerIdentity+1), false, time.Minute)
	}
	err := c.addLocked(&session{id: "new", identity: "stranger", expires: now.Add(time.Hour)}, false)
	if protocol.CodeOf(err) != protocol.CodeLimitReached {
		t.Fatalf("a login without admin into a full table of others' sessions: %v; want -32011", err)
	}
	add("root-2", true, 0)
	if c.all[root.id] == nil {
		t.Fatal("an admin's login ended the admin's session")
	}
	if c.all[oldestViewer.id] != nil {
		t.Fatal("an admin's login in a full table kept the oldest session without admin")
	}
	if len(c.all) != maxConsoleSessions {
		t.Fatalf("%d sessions, want %d", len(c.all), maxConsoleSessions)
	}
}
