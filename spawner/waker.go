package spawner

import (
	"context"
	"time"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// The spawner is the waker of the agents it starts (docs/PROTOCOL.md,
// "Durable subscriptions"): once an agent is ready, the spawner asks the
// bus, with subscriptions.setWaker, to tell it when a message is held
// for the agent on a durable subscription while the agent is away; the
// bus's system:client.wake event then starts the agent, which subscribes
// again and is delivered what was held.

// registerWaker makes the spawner the waker of agentID on the bus, once
// per agent id and run of the spawner. A bus that refuses (its grant
// lacks waker: true) leaves the agent without one:
// its held messages wait for its next start by a message to its
// conversation, or end their hold lifetime.
func (s *Spawner) registerWaker(conn *peer.Conn, agentID string) {
	s.mu.Lock()
	if s.wakerOf == nil {
		s.wakerOf = make(map[string]bool)
	}
	done := s.wakerOf[agentID]
	s.wakerOf[agentID] = true
	s.mu.Unlock()
	if done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := conn.Call(ctx, protocol.MethodSubscriptionsWaker, protocol.SubscriptionsWakerParams{ClientID: agentID}, nil); err != nil {
		s.log.Warn("could not register as the agent's waker; a message held for it on a durable subscription will not start it", "agent_id", agentID, "err", err)
		s.mu.Lock()
		delete(s.wakerOf, agentID)
		s.mu.Unlock()
	}
}

// wakeHeldLocked starts the hibernated agent a wake event names, when the
// spawner is its waker; s.mu is held.
func (s *Spawner) wakeHeldLocked(ev *protocol.ClientEvent) {
	if ev.Waker != s.opts.ClientID {
		return
	}
	sl := s.byAgent[peer.AgentTopic(ev.ClientID)]
	if sl == nil {
		return // not one of ours
	}
	if a := sl.agent; a != nil {
		// Running (or starting) already, or stopping to hibernate: its
		// connection has closed, which is why the bus held the message,
		// but its process is not reaped yet. The bus asks again only
		// for a message held long after (rewakeAfter): it is started
		// once it has exited (finish).
		if a.hibernate != "" && a.rewake == "" {
			s.log.Info("a message is held for an agent still stopping; waking it once it has exited", "agent_id", ev.ClientID, "pattern", ev.Pattern)
			a.rewake = ReasonMessage
		}
		return
	}
	s.log.Info("waking an agent: a message is held for it", "agent_id", ev.ClientID, "pattern", ev.Pattern)
	s.goWakeLocked(sl, ReasonMessage)
}
