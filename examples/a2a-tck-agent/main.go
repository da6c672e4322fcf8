// Command a2a-tck-agent is the bus agent the official A2A TCK
// (a2aproject/a2a-tck, branch 1.0-dev) runs against: `bub serve
// --a2a-config` makes it an A2A agent, and it answers each task the way
// the TCK's scenarios/*.feature ask for the task's message id prefix
// (tck-complete-task, tck-artifact-file, tck-stream-001, ...). It is an
// ordinary bus agent, not an A2A server: it takes the A2A server's
// payloads with a2a.TaskOf and answers with a2a.SendStatus,
// a2a.SendArtifact and a2a.SendDirectMessage, as any Go agent would
// (docs/A2A.md, "The agent's answers").
//
// It reads its bus environment as every agent does: BUB_BUS_URL,
// BUB_AGENT_ID (its clientId), BUB_DEFAULT_TOPIC (the topic the A2A
// configuration gives the agent) and BUB_TOKEN; BUB_TCK_LONG_TASK (a
// duration, default 4s) is how long the long-running scenario works
// before it completes, twice the TCK's streaming timeout.
//
// run-tck.sh beside it starts bub serve, this agent and the TCK; see
// README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/bub-bus/bub/peer"
)

// defaultLongTask is the long-running scenario's work: the TCK's
// scenario says "wait for 2x streaming timeout", and the SUTs the TCK
// ships wait 4 s.
const defaultLongTask = 4 * time.Second

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log); err != nil {
		fmt.Fprintf(os.Stderr, "a2a-tck-agent: %v\n", err)
		os.Exit(1)
	}
}

// run connects the agent and serves until ctx ends or the bus closes
// the connection for good.
func run(ctx context.Context, log *slog.Logger) error {
	env := peer.FromEnv()
	if env.DefaultTopic == "" {
		return errors.New("BUB_DEFAULT_TOPIC is not set: the agent's topic in the A2A configuration")
	}
	long := defaultLongTask
	if v := os.Getenv("BUB_TCK_LONG_TASK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("BUB_TCK_LONG_TASK %q: want a duration such as 4s", v)
		}
		long = d
	}
	a := &agent{log: log, longTask: long}
	conn, err := peer.DialEnv(ctx, a.handle, &peer.Options{Logger: log})
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Subscribe(ctx, env.DefaultTopic, a.handle, nil); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	log.Info("a2a-tck-agent ready", "agent_id", env.AgentID, "topic", env.DefaultTopic)
	select {
	case <-ctx.Done():
		return nil
	case <-conn.Done():
		return conn.Err()
	}
}
