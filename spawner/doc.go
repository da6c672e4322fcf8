// Package spawner is the default handler of bub-bus: a peer that starts
// an agent process for each conversation that has none, and makes sure the
// message that started it reaches it.
//
// Start with New, which takes Options (the agent Command, the fallback
// Patterns, the limits), then Run, which serves until its context ends.
// `bub spawner` is this package behind command-line flags.
//
// # How a message reaches a new agent
//
// The spawner subscribes its patterns (by default tg:* and agent:*) as
// fallback subscriptions: the bus gives it a message only when no regular
// subscription matches the topic. For a message on topic T it then
//
//  1. starts the agent command in T's workspace (WorkspaceName) with
//     BUB_BUS_URL, BUB_AGENT_ID (a new id, "agent-" and 12 hex digits),
//     BUB_DEFAULT_TOPIC = T and BUB_WORKSPACE in its environment;
//  2. waits until the bus reports, on system:client.subscribed, that the
//     agent subscribed to a pattern matching T, so the agent is known to
//     be able to take the message before anyone says it is ready;
//  3. answers the delivery should_retry, and the bus routes the message
//     again, now to the agent, with the same messageId and the original
//     from.
//
// The agent must subscribe to T itself (peer.DialEnv plus a Subscribe of
// BUB_DEFAULT_TOPIC does it). One that does not within SpawnTimeout is
// stopped and the spawn counts as failed. Messages for T that arrive
// while its agent starts wait for the same agent; there is never more
// than one per topic.
//
// # Hibernation
//
// An agent with no delivery for Options.IdleTimeout is hibernated: stopped
// (SIGTERM, then SIGKILL after StopTimeout), its workspace and agent id
// kept, and started again, woken, by the next message for its topic. The
// spawner knows which agents hold a delivery from the bus's
// system:client.busy and system:client.idle events, and never stops one
// that does; busy past the bus's delivery timeout and a margin, its idle
// event was lost, and it counts as idle. At MaxAgents a message that needs an agent hibernates the
// least recently used idle one and takes its place; when every agent
// holds a delivery its conversation waits in the spawner's queue, its
// message held by the bus, and the oldest queued gets the next place:
// its agent's subscribe has the bus deliver the held message. Each
// topic's agent id is kept in Options.DataDir, so a restarted spawner
// wakes an agent with the id the bus's retries and holds address. Wake
// starts an agent for a caller other than a message.
//
// # Agents' lives
//
// An agent runs until it exits or is hibernated. Its stdout and stderr go to the
// spawner's log, a record per line with its id. When it exits it is
// reaped and no longer counts towards MaxAgents. An agent that crashes
// (exits non-zero or is killed, when the spawner did not ask) after it
// was ready is restarted, with the same id, so that the bus's retry of
// the message it was handling (which the bus addresses to the agent's
// clientId) reaches the new process. Failures in a row back off: see
// Options.RestartDelay. A clean exit (status 0) is final; the next message
// for the topic starts a new process, again with the same id and
// workspace. On shutdown every agent gets SIGTERM, then SIGKILL after
// StopTimeout; on Linux an agent is killed if the spawner dies without
// stopping it.
//
// # Events
//
// The spawner publishes an agent_event on system:agent.spawned,
// system:agent.ready, system:agent.exited (with the exit status and
// whether it restarts), system:agent.spawn_failed (with the error),
// system:agent.hibernated and system:agent.woken (with the reason); see
// Event. Registry holds its metrics. They are system: topics so that they neither match the
// spawner's own agent:* pattern nor the bus's agent:* hold pattern.
//
// # Caveats
//
//   - Readiness comes from the bus's client events. A subscriber to
//     system:client.* (or system:*) newer than the spawner, under a policy
//     that stops propagation, keeps those events from it, and spawns then
//     time out: observers of system events should subscribe with policy
//     continueAll, as the spawner does.
//   - The spawner remembers every topic it served (its agent id, on
//     disk too, and backoff), in memory for as long as it runs.
//   - Secrets belong in Options.Env, never in Options.Command.
package spawner
