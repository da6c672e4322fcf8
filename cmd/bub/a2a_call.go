package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/peer"
)

func init() {
	register("a2a", "call a remote A2A agent and print or publish its task's updates (a2a call)", runA2A)
}

const a2aUsage = `a2a call --agent URL (--text TEXT | --message @FILE|-|JSON) [flags]`

var a2aSynopses = map[string]string{
	"call": "a2a call --agent URL (--text TEXT | --message @FILE|-|JSON) [--publish TOPIC] [flags]\n\n" +
		"Sends one message to a remote A2A 1.0 agent, found by its card (URL/.well-known/agent-card.json,\n" +
		"or the card's own URL), and follows its task: streamed when the card says the agent streams,\n" +
		"else one blocking SendMessage. Each event is printed on stdout as one JSON line, the A2A\n" +
		"StreamResponse; with --publish each is also published on the bus as\n" +
		`{"type":"a2a_update","agent","text","correlation_id":TASK,"conversation_id":CONTEXT,"state","final","event"}` + "\n" +
		"so that a bus agent can call an agent that speaks A2A only (docs/A2A.md, \"Calling remote agents\").\n" +
		"To answer a task that waits for input, send again with --task-id (and its --context-id).\n\n" +
		"Exit status: 0 when the task completed, or the agent answered with a message;\n" +
		"1 when it failed, was rejected or canceled, the stream ended before the task did, the call failed,\n" +
		"or an update could not be published; 2 on a usage error;\n" +
		fmt.Sprintf("%d when the task waits for its caller (input-required, auth-required).", exitWaiting),
}

// exitWaiting is a2a call's exit status for a task that waits for its
// caller: neither done nor failed, and a script must tell it from both.
const exitWaiting = 3

// a2aCallConfig is bub a2a call's flags.
type a2aCallConfig struct {
	client    clientFlags
	agent     string
	token     string
	tokenFile string
	text      string
	message   string
	taskID    string
	contextID string
	publish   string
	noStream  bool
	timeout   time.Duration
}

func runA2A(ctx context.Context, std stdio, args []string) int {
	_, synopsis, args, code, ok := subcommand(&std, "a2a", a2aUsage, a2aSynopses, args)
	if !ok {
		return code
	}
	var cfg a2aCallConfig
	fs := newFlagSet(std, "a2a call", synopsis)
	fs.StringVar(&cfg.agent, "agent", "", "the remote agent's URL (its card is at URL/.well-known/agent-card.json), or its card's URL")
	fs.StringVar(&cfg.token, "agent-token", "", "bearer credential for the remote agent (prefer --agent-token-file: a command line is visible to every user of the machine)")
	fs.StringVar(&cfg.tokenFile, "agent-token-file", "", "file holding the remote agent's bearer credential")
	fs.StringVar(&cfg.text, "text", "", "the message's text (one text part)")
	fs.StringVar(&cfg.message, "message", "", "the whole A2A message as JSON (parts, metadata): @FILE reads a file, - reads stdin, anything else is the JSON itself")
	fs.StringVar(&cfg.taskID, "task-id", "", "continue this task of the agent's (one waiting for input)")
	fs.StringVar(&cfg.contextID, "context-id", "", "the conversation (A2A context id) the message belongs to")
	fs.StringVar(&cfg.publish, "publish", "", "also publish each update on this bus topic (needs the bus: --bus-url and a credential)")
	fs.BoolVar(&cfg.noStream, "no-stream", false, "send a blocking SendMessage even when the agent streams")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "give up after this long (default: wait for the task, as A2A's blocking send does)")
	for _, name := range []string{"agent", "agent-token", "agent-token-file", "text", "message", "task-id", "context-id", "publish", "no-stream", "timeout"} {
		bindEnvAs(fs, name, "BUB_A2A_"+strings.TrimPrefix(envName(name), "BUB_"))
	}
	cfg.client.addFlags(fs)
	if code, ok := parseFlags(fs, std, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usagef(std, "a2a call", "unexpected argument %q; quote the text and pass it with --text", fs.Arg(0))
	}
	if cfg.agent == "" {
		return usagef(std, "a2a call", "no agent: pass --agent URL or set BUB_A2A_AGENT")
	}
	msg, err := cfg.buildMessage(std)
	if err != nil {
		return usagef(std, "a2a call", "%v", err)
	}
	token, err := readSecret(cfg.token, cfg.tokenFile, "--agent-token", "--agent-token-file")
	if err != nil {
		return usagef(std, "a2a call", "%v", err)
	}
	if cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
	}
	var conn *peer.Conn
	if cfg.publish != "" {
		// Connected before the call, so that a bus that cannot be
		// reached fails the command before the remote agent acts.
		dialCtx, cancel := context.WithTimeout(ctx, dialTimeout)
		conn, err = cfg.client.dial(dialCtx, std, peer.Options{NoReconnect: true, PublishOnly: true})
		cancel()
		if err != nil {
			return errorf(std, "a2a call: --publish %s: %v; nothing was sent to the agent", cfg.publish, err)
		}
		defer conn.Close()
	}
	var pubErr error
	res, err := a2a.Call(ctx, &a2a.CallOptions{Agent: cfg.agent, Token: token, Message: msg, NoStream: cfg.noStream,
		OnEvent: func(ev spec.Event, now *a2a.CallResult) error {
			line, err := json.Marshal(spec.StreamResponse{Event: ev})
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(std.out, "%s\n", line); err != nil {
				return fmt.Errorf("write stdout: %w", err)
			}
			if conn != nil && pubErr == nil {
				pubErr = publishUpdate(ctx, conn, cfg.publish, cfg.agent, ev, now)
			}
			return nil
		},
	})
	if err != nil {
		if ctx.Err() != nil && cfg.timeout > 0 {
			return errorf(std, "a2a call: no end of the task within --timeout %s (%v); the agent may still be working on it%s", cfg.timeout, err, followHint(res))
		}
		return errorf(std, "%v", err)
	}
	if pubErr != nil {
		return errorf(std, "a2a call: %v (the agent's task is %s)", pubErr, describe(res))
	}
	switch {
	case res.Done():
		return 0
	case res.Waiting():
		fmt.Fprintf(std.err, "bub a2a call: task %s waits for its caller (%s): %q; answer with --task-id %s --context-id %s\n", res.TaskID, res.State, res.Text, res.TaskID, res.ContextID)
		return exitWaiting
	case res.State.Terminal():
		return errorf(std, "a2a call: task %s ended %s: %q", res.TaskID, res.State, res.Text)
	}
	return errorf(std, "a2a call: the agent's stream ended with task %s still %s%s", res.TaskID, cmpState(res.State), followHint(res))
}

// buildMessage makes the message of --text or --message, with
// --task-id and --context-id.
func (c *a2aCallConfig) buildMessage(std stdio) (*spec.Message, error) {
	var msg *spec.Message
	switch {
	case c.text != "" && c.message != "":
		return nil, errors.New("give --text or --message, not both")
	case c.text != "":
		msg = spec.NewMessage(spec.MessageRoleUser, spec.NewTextPart(c.text))
	case c.message != "":
		data, source, err := readArg(std, c.message, "--message")
		if err != nil {
			return nil, err
		}
		msg = &spec.Message{}
		if err := json.Unmarshal(data, msg); err != nil {
			return nil, fmt.Errorf("message from %s is not an A2A message: %v", source, err)
		}
		if len(msg.Parts) == 0 {
			return nil, fmt.Errorf("message from %s has no parts", source)
		}
	default:
		return nil, errors.New("no message: pass --text TEXT or --message @FILE|-|JSON")
	}
	if c.taskID != "" {
		msg.TaskID = spec.TaskID(c.taskID)
	}
	if c.contextID != "" {
		msg.ContextID = c.contextID
	}
	return msg, nil
}

// readArg reads a flag's value that may be @FILE or - (stdin), and
// returns it with where it came from.
func readArg(std stdio, arg, flagName string) ([]byte, string, error) {
	switch {
	case arg == "-":
		data, err := readAll(std.in)
		return data, "stdin", err
	case strings.HasPrefix(arg, "@"):
		data, err := os.ReadFile(arg[1:])
		if err != nil {
			return nil, arg[1:], fmt.Errorf("%s: %w", flagName, err)
		}
		return data, arg[1:], nil
	}
	return []byte(arg), flagName, nil
}

// publishUpdate publishes ev's Update on topic. An update that reaches
// nobody is an error too: the bus agent that asked would never see it.
func publishUpdate(ctx context.Context, conn *peer.Conn, topic, agent string, ev spec.Event, res *a2a.CallResult) error {
	u, err := a2a.NewUpdate(agent, ev, res)
	if err != nil {
		return err
	}
	r, err := conn.SendMessage(ctx, topic, u, nil)
	switch {
	case err != nil:
		return fmt.Errorf("publish an update on %s: %w", topic, err)
	case r.NoSubscribers():
		return fmt.Errorf("publish an update on %s: nobody subscribes to it", topic)
	}
	return nil
}

// describe names where res left the task.
func describe(res *a2a.CallResult) string {
	if res == nil || res.TaskID == "" {
		return "unknown"
	}
	return fmt.Sprintf("%s, %s", res.TaskID, cmpState(res.State))
}

// followHint tells how to find the task again, when there is one.
func followHint(res *a2a.CallResult) string {
	if res == nil || res.TaskID == "" {
		return ""
	}
	return fmt.Sprintf("; it is task %s (context %s) of the agent: read it with GetTask or SubscribeToTask", res.TaskID, res.ContextID)
}

// cmpState names a state, "unknown" for none.
func cmpState(s spec.TaskState) string {
	if s == "" {
		return "in an unknown state"
	}
	return string(s)
}
