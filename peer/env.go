package peer

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// DefaultBusURL is where a client looks for the bus when BUB_BUS_URL is
// not set: the address bub serve listens on by default.
const DefaultBusURL = "ws://127.0.0.1:7892/"

// Env is an agent's bus environment, as the agent spawner sets it.
type Env struct {
	// BusURL is BUB_BUS_URL, or DefaultBusURL when it is unset or empty.
	// It may list several nodes of one bus, comma-separated
	// (ws://a:7892/,ws://b:7892/), as Dial takes it.
	BusURL string
	// AgentID is BUB_AGENT_ID, the agent's clientId.
	AgentID string
	// DefaultTopic is BUB_DEFAULT_TOPIC, where the agent's replies go
	// when it names no topic.
	DefaultTopic string
	// Workspace is BUB_WORKSPACE, the agent's working directory.
	Workspace string
	// Token is BUB_TOKEN, the agent's credential (the spawner mints one
	// per agent when the bus has auth).
	Token string
}

// FromEnv reads the agent environment from the process environment.
func FromEnv() Env {
	env := Env{
		BusURL:       os.Getenv("BUB_BUS_URL"),
		AgentID:      os.Getenv("BUB_AGENT_ID"),
		DefaultTopic: os.Getenv("BUB_DEFAULT_TOPIC"),
		Workspace:    os.Getenv("BUB_WORKSPACE"),
		Token:        os.Getenv("BUB_TOKEN"),
	}
	if env.BusURL == "" {
		env.BusURL = DefaultBusURL
	}
	return env
}

// AgentTopic returns the topic of an agent's direct messages,
// agent:{agentID}.
func AgentTopic(agentID string) string { return "agent:" + agentID }

// DialEnv connects as the agent FromEnv describes, as an agent does when
// it starts: it dials BUB_BUS_URL with BUB_AGENT_ID as clientId and
// BUB_DEFAULT_TOPIC as default topic (fields set in opts win), then
// subscribes handler to agent:{BUB_AGENT_ID}. BUB_AGENT_ID is required.
func DialEnv(ctx context.Context, handler Handler, opts *Options) (*Conn, error) {
	env := FromEnv()
	if env.AgentID == "" {
		return nil, errors.New("dial from environment: BUB_AGENT_ID is not set")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.ClientID == "" {
		o.ClientID = env.AgentID
	}
	if o.DefaultTopic == "" {
		o.DefaultTopic = env.DefaultTopic
	}
	if o.Token == "" {
		o.Token = env.Token
	}
	c, err := Dial(ctx, env.BusURL, &o)
	if err != nil {
		return nil, err
	}
	if err := c.Subscribe(ctx, AgentTopic(env.AgentID), handler, nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("dial from environment: %w", err)
	}
	return c, nil
}
