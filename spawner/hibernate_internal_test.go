package spawner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// TestMakeRoomChoosesLeastRecentlyUsedIdle: at capacity, the agents
// hibernated are the idle ones used least recently; an agent holding a
// delivery, stopping, not yet ready, or new and not yet served is never
// chosen, and no more agents are stopped than conversations wait, in the
// queue or in a Wake.
func TestMakeRoomChoosesLeastRecentlyUsedIdle(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	type spec struct {
		id         string
		ready      bool
		busy       bool
		stopping   string // hibernate reason when stopping
		served     bool
		readyAgo   time.Duration
		lastActive time.Duration // ago
	}
	idle := func(id string, last time.Duration) spec {
		return spec{id: id, ready: true, served: true, readyAgo: time.Hour, lastActive: last}
	}
	for _, tc := range []struct {
		name    string
		agents  []spec
		waiting int // in a Wake
		queued  int
		want    []string
	}{
		{"oldest idle", []spec{idle("a", time.Minute), idle("b", time.Hour), idle("c", time.Second)}, 1, 0, []string{"b"}},
		{"busy is kept", []spec{idle("a", time.Minute), {id: "b", ready: true, busy: true, served: true, readyAgo: time.Hour, lastActive: time.Second}}, 1, 0, []string{"a"}},
		{"busy past the delivery timeout lost its idle event", []spec{idle("a", time.Minute), {id: "b", ready: true, busy: true, served: true, readyAgo: time.Hour, lastActive: time.Hour}}, 1, 0, []string{"b"}},
		{"every agent busy", []spec{{id: "a", ready: true, busy: true, served: true, readyAgo: time.Hour}}, 1, 0, nil},
		{"starting is kept", []spec{{id: "a", readyAgo: time.Hour, lastActive: time.Hour}, idle("b", time.Second)}, 1, 0, []string{"b"}},
		{"new, its message on its way", []spec{{id: "a", ready: true, readyAgo: 0, lastActive: 0}}, 1, 0, nil},
		{"new, no message for the spawn timeout", []spec{{id: "a", ready: true, readyAgo: 2 * time.Second, lastActive: 2 * time.Second}}, 1, 0, []string{"a"}},
		{"one already leaving for the one waiting", []spec{{id: "a", ready: true, served: true, stopping: ReasonCapacity}, idle("b", time.Hour)}, 1, 0, nil},
		{"one leaving, two waiting", []spec{{id: "a", ready: true, served: true, stopping: ReasonCapacity}, idle("b", time.Hour)}, 2, 0, []string{"b"}},
		{"one leaving for idleness makes the room", []spec{{id: "a", ready: true, served: true, stopping: ReasonIdle, lastActive: time.Hour}, idle("b", time.Minute)}, 1, 0, nil},
		{"one for each queued, oldest first", []spec{idle("a", time.Minute), idle("b", time.Hour), idle("c", time.Second), idle("d", 2*time.Hour)}, 0, 3, []string{"d", "b", "a"}},
		{"queued and waking", []spec{idle("a", time.Minute), idle("b", time.Hour), idle("c", time.Second)}, 1, 1, []string{"b", "a"}},
		{"fewer idle than waiting", []spec{idle("a", time.Minute), {id: "b", ready: true, busy: true, served: true, readyAgo: time.Hour}}, 0, 3, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Spawner{opts: Options{SpawnTimeout: time.Second}, agents: map[string]*agent{}, waiting: tc.waiting}
			for _, sp := range tc.agents {
				a := newAgent(sp.id, &slot{topic: "tg:" + sp.id, agentID: sp.id})
				a.ready, a.busy, a.served = sp.ready, sp.busy, sp.served
				a.readyAt, a.lastActive = ago(sp.readyAgo), ago(sp.lastActive)
				if sp.stopping != "" {
					a.stopping, a.hibernate = true, sp.stopping
				}
				s.agents[sp.id] = a
			}
			for i := range tc.queued {
				s.queue = append(s.queue, &slot{topic: fmt.Sprintf("tg:queued-%d", i)})
			}
			var got []string
			for _, v := range s.makeRoomLocked() {
				got = append(got, v.id)
				if !v.stopping || v.hibernate != ReasonCapacity {
					t.Errorf("victim %s not marked stopping for capacity", v.id)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("victims %q, want %q", got, tc.want)
			}
		})
	}
}

// TestIdleTimer: an agent is hibernated for idleness IdleTimeout after
// its last delivery, never while it holds one, and a new agent that was
// delivered nothing not before SpawnTimeout.
func TestIdleTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Spawner{opts: Options{IdleTimeout: time.Second, SpawnTimeout: 5 * time.Second, StopTimeout: time.Second}, agents: map[string]*agent{}}
		start := func(id string, served bool) *agent {
			a := newAgent(id, &slot{topic: "tg:" + id, agentID: id})
			a.ready, a.served, a.readyAt, a.lastActive = true, served, time.Now(), time.Now()
			s.mu.Lock()
			s.agents[id] = a
			s.armIdleLocked(a)
			s.mu.Unlock()
			return a
		}
		reason := func(a *agent) string {
			s.mu.Lock()
			defer s.mu.Unlock()
			return a.hibernate
		}
		served, fresh, busy := start("served", true), start("fresh", false), start("busy", true)
		s.mu.Lock()
		busy.busy = true
		busy.idleTimer.Stop()
		s.mu.Unlock()

		time.Sleep(999 * time.Millisecond) // the bubble's fake time
		synctest.Wait()
		if reason(served) != "" {
			t.Fatal("hibernated before its idle timeout")
		}
		time.Sleep(time.Millisecond) // the bubble's fake time
		synctest.Wait()
		if got := reason(served); got != ReasonIdle {
			t.Fatalf("served agent: %q after its idle timeout, want %q", got, ReasonIdle)
		}
		if reason(fresh) != "" {
			t.Fatal("a new agent was hibernated before its first delivery could come")
		}
		time.Sleep(4 * time.Second) // the bubble's fake time
		synctest.Wait()
		if got := reason(fresh); got != ReasonIdle {
			t.Fatalf("new agent: %q after the spawn timeout, want %q", got, ReasonIdle)
		}
		time.Sleep(time.Hour) // the bubble's fake time
		synctest.Wait()
		if reason(busy) != "" {
			t.Fatal("an agent holding a delivery was hibernated")
		}
		for _, a := range []*agent{served, fresh, busy} {
			a.idleTimer.Stop()
		}
	})
}

// TestReconnectEndsBusy: an agent that connects again holds no delivery,
// so it is idle and hibernated after IdleTimeout, even though the idle
// event of its last connection never came (a bus restart loses it).
func TestReconnectEndsBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Spawner{opts: Options{IdleTimeout: time.Second, SpawnTimeout: time.Second, StopTimeout: time.Second},
			agents: map[string]*agent{}, freed: make(chan struct{})}
		a := newAgent("a", &slot{topic: "tg:a", agentID: "a"})
		a.ready, a.served, a.readyAt, a.lastActive = true, true, time.Now(), time.Now()
		s.agents["a"] = a
		event := func(name string) {
			t.Helper()
			time.Sleep(time.Millisecond) // the bubble's fake time, as between real events
			clientEvent(t, s, name, "a")
		}
		state := func() (busy bool, hibernate string) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return a.busy, a.hibernate
		}
		event(protocol.EventConnected)
		event(protocol.EventBusy)
		if busy, _ := state(); !busy {
			t.Fatal("not busy after its busy event")
		}
		// The bus restarts: no idle event; the agent connects again.
		event(protocol.EventConnected)
		if busy, _ := state(); busy {
			t.Fatal("still busy on a new connection")
		}
		time.Sleep(time.Second) // the bubble's fake time
		synctest.Wait()
		if _, reason := state(); reason != ReasonIdle {
			t.Fatalf("hibernated for %q after its idle timeout, want %q", reason, ReasonIdle)
		}
	})
}

// TestShutdownWaitsForWakes: a wake for the retry of a message delivered
// to a reaped agent, under way at shutdown (here waiting for a place),
// has ended when shutdown returns.
func TestShutdownWaitsForWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Spawner{opts: Options{MaxAgents: 1, SpawnTimeout: time.Second, StopTimeout: time.Second},
			log: slog.New(slog.DiscardHandler), agents: map[string]*agent{}, slots: map[string]*slot{},
			byAgent: map[string]*slot{}, freed: make(chan struct{})}
		busy := newAgent("a", &slot{topic: "tg:a", agentID: "a"})
		busy.ready, busy.busy = true, true
		s.agents["a"] = busy
		asleep := &slot{topic: "tg:b", agentID: "b", asleep: true}
		s.slots["tg:b"], s.byAgent[peer.AgentTopic("b")] = asleep, asleep

		clientEvent(t, s, protocol.EventBusy, "b")
		synctest.Wait()
		s.mu.Lock()
		waiting := s.waiting
		s.mu.Unlock()
		if waiting != 1 {
			t.Fatalf("%d waiting for a place, want the wake", waiting)
		}
		s.shutdown()
		s.mu.Lock()
		waiting = s.waiting
		s.mu.Unlock()
		if waiting != 0 {
			t.Fatal("the wake still waits for a place after shutdown")
		}
	})
}

// TestLostIdleEventEndsBusy: an agent whose idle event never comes (the
// spawner's connection to the bus dropped meanwhile) counts as busy no
// longer than the bus's delivery timeout and busyMargin, and is then
// hibernated for idleness IdleTimeout later, and may make room.
func TestLostIdleEventEndsBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Spawner{opts: Options{IdleTimeout: time.Second, SpawnTimeout: time.Second, StopTimeout: time.Second},
			deliveryTimeout: 2 * time.Second, agents: map[string]*agent{}, freed: make(chan struct{})}
		a := newAgent("a", &slot{topic: "tg:a", agentID: "a"})
		a.ready, a.served, a.readyAt, a.lastActive = true, true, time.Now(), time.Now()
		s.agents["a"] = a
		for _, name := range []string{protocol.EventConnected, protocol.EventBusy} {
			time.Sleep(time.Millisecond) // the bubble's fake time
			clientEvent(t, s, name, "a")
		}
		state := func() (idle bool, hibernate string) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.idleLocked(a), a.hibernate
		}
		time.Sleep(s.busyLimit() - time.Millisecond) // the bubble's fake time
		synctest.Wait()
		if idle, reason := state(); idle || reason != "" {
			t.Fatalf("idle %v, hibernated for %q within the delivery timeout and margin", idle, reason)
		}
		time.Sleep(time.Millisecond) // the bubble's fake time
		if idle, _ := state(); !idle {
			t.Fatal("still busy past the delivery timeout and margin")
		}
		time.Sleep(s.opts.IdleTimeout) // the bubble's fake time
		synctest.Wait()
		if _, reason := state(); reason != ReasonIdle {
			t.Fatalf("hibernated for %q, want %q", reason, ReasonIdle)
		}
	})
}

// clientEvent hands s the bus's event name about clientID, timed now.
func clientEvent(t *testing.T, s *Spawner, name, clientID string) {
	t.Helper()
	payload, err := json.Marshal(protocol.ClientEvent{Type: protocol.TypeClientEvent, Event: name, ClientID: clientID,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil {
		t.Fatal(err)
	}
	// A Conn never dialled has the serverId "", as the From.
	if _, err := s.handleClientEvent(context.Background(), &peer.Delivery{Topic: "system:client." + name, Payload: payload, Conn: &peer.Conn{}}); err != nil {
		t.Fatal(err)
	}
}
