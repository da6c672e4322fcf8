package spawner

import "errors"

// Why a spawn did not produce a ready agent. They appear, wrapped with the
// agent and topic, in the message of a fallback answer, in the error of a
// system:agent.spawn_failed event and in the spawner's log.
var (
	// ErrSpawnTimeout: the agent did not subscribe to a pattern matching
	// its topic within Options.SpawnTimeout, and was stopped.
	ErrSpawnTimeout = errors.New("spawn timeout")
	// ErrExitedEarly: the agent exited before it subscribed to a pattern
	// matching its topic.
	ErrExitedEarly = errors.New("agent exited before subscribing")
	// ErrAtCapacity: Options.MaxAgents agents are already running.
	ErrAtCapacity = errors.New("at capacity")
	// ErrBackedOff: the topic's agent failed recently, and the crash-loop
	// backoff has not elapsed.
	ErrBackedOff = errors.New("backing off after failures")
	// ErrClosed: the spawner is shutting down and starts no agents.
	ErrClosed = errors.New("spawner closed")
)
