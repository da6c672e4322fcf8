package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

func init() {
	register("tool-subscriptions", "start, list and cancel tool subscriptions (the callbacks tools post events to)", runToolSubs)
}

const toolSubsUsage = `tool-subscriptions <start|list|cancel> [flags]

Tool subscriptions (docs/PROTOCOL.md, "Tool subscriptions") as the running
bus keeps them. Run by an agent, the command acts as the agent
($BUB_AGENT_ID); a subscription is its starter's alone to cancel.
  bub tool-subscriptions start --group-id G --tool-call-id C [--topic T] [--tool TOPIC]
  bub tool-subscriptions list [--group-id G]
  bub tool-subscriptions cancel --group-id G --tool-call-id C
Every subcommand takes --json for machine-readable output.`

var toolSubsSynopses = map[string]string{
	"start": "tool-subscriptions start --group-id G --tool-call-id C [--topic T] [--tool TOPIC] [--json]\n\n" +
		"Records a subscription of thread G's tool call C and prints its callback: the URL a\n" +
		"tool POSTs subscription_event messages to, and the topic a tool that is a bus peer\n" +
		"sends them to. Each event is delivered on --topic as a message from the starter.\n" +
		"The callback is a secret, shown only here.",
	"list": "tool-subscriptions list [--group-id G] [--json]\n\n" +
		"Lists the active subscriptions this client started (every one, for an admin of a\n" +
		"bus with auth), of thread G only with --group-id.",
	"cancel": "tool-subscriptions cancel --group-id G --tool-call-id C [--json]\n\n" +
		"Cancels a subscription: once the command returns, no event of it is delivered,\n" +
		"and its tool was sent cancel_tool_call on its topic, best effort.",
}

// toolSubsConfig is the flags of the tool-subscriptions subcommands.
type toolSubsConfig struct {
	client     clientFlags
	json       bool
	timeout    time.Duration
	groupID    string
	toolCallID string
	topic      string
	tool       string
}

func runToolSubs(ctx context.Context, std stdio, args []string) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintf(std.out, "Usage: bub %s\n", toolSubsUsage)
		return 0
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(std.err, "Usage: bub %s\n", toolSubsUsage)
		return 2
	}
	sub, args := args[0], args[1:]
	synopsis, ok := toolSubsSynopses[sub]
	if !ok {
		fmt.Fprintf(std.err, "bub tool-subscriptions: unknown subcommand %q\n\nUsage: bub %s\n", sub, toolSubsUsage)
		return 2
	}
	std.cmd = "tool-subscriptions " + sub
	var cfg toolSubsConfig
	fs := newFlagSet(std, std.cmd, synopsis)
	cfg.client.addFlags(fs)
	fs.BoolVar(&cfg.json, "json", false, "print JSON")
	fs.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "how long to wait for the bus")
	fs.StringVar(&cfg.groupID, "group-id", "", "the thread (group_id)")
	if sub != "list" {
		fs.StringVar(&cfg.toolCallID, "tool-call-id", "", "the tool call that started the subscription")
	}
	if sub == "start" {
		fs.StringVar(&cfg.topic, "topic", "", "where the events are delivered (default: agent:$BUB_AGENT_ID, else the clientId's agent: topic)")
		fs.StringVar(&cfg.tool, "tool", "", "the tool's topic, which a cancel notifies")
	}
	if code, ok := parseFlags(fs, std, args); !ok {
		return code
	}
	if sub != "list" && (cfg.groupID == "" || cfg.toolCallID == "") {
		return usageError(std, fs, "--group-id and --tool-call-id are required")
	}
	if cfg.client.clientID == "" && os.Getenv("BUB_AGENT_ID") == "" {
		// A made-up clientId could never list or cancel what it starts.
		return usageError(std, fs, "give --client-id, or run it as an agent (BUB_AGENT_ID): a subscription is its starter's")
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	conn, err := cfg.client.dial(ctx, std, peer.Options{CallTimeout: cfg.timeout, NoReconnect: true, PublishOnly: true})
	if err != nil {
		return errorf(std, "%s: %v", std.cmd, err)
	}
	defer conn.Close()
	var out any
	var text func() string
	switch sub {
	case "start":
		ts, err := conn.StartToolSubscription(ctx, cfg.groupID, cfg.toolCallID, &peer.ToolSubscriptionOptions{Topic: cfg.topic, Tool: cfg.tool})
		if err != nil {
			return errorf(std, "%s: %v", std.cmd, err)
		}
		out = map[string]string{"group_id": ts.GroupID, "tool_call_id": ts.ToolCallID, "topic": ts.Topic, "callback_url": ts.CallbackURL, "callback_topic": ts.CallbackTopic}
		text = func() string {
			return fmt.Sprintf("callback_url   %s\ncallback_topic %s\ntopic          %s\n", ts.CallbackURL, ts.CallbackTopic, ts.Topic)
		}
	case "list":
		list, err := conn.ToolSubscriptions(ctx, cfg.groupID)
		if err != nil {
			return errorf(std, "%s: %v", std.cmd, err)
		}
		out = protocol.ToolSubscriptionListResult{Subscriptions: list}
		text = func() string { return toolSubTable(list) }
	default: // cancel
		r, err := conn.CancelToolSubscription(ctx, cfg.groupID, cfg.toolCallID)
		if err != nil {
			return errorf(std, "%s: %v", std.cmd, err)
		}
		out = r
		text = func() string {
			if r.Notified {
				return "cancelled; the tool was sent cancel_tool_call\n"
			}
			return "cancelled; no tool topic to notify\n"
		}
	}
	if cfg.json {
		b, _ := json.Marshal(out)
		fmt.Fprintln(std.out, string(b))
		return 0
	}
	fmt.Fprint(std.out, text())
	return 0
}

// toolSubTable prints subscriptions as a table.
func toolSubTable(list []protocol.ToolSubscription) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "GROUP_ID\tTOOL_CALL_ID\tTOPIC\tTOOL\tOWNER\tCREATED")
	for _, ts := range list {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", ts.GroupID, ts.ToolCallID, ts.Topic, ts.Tool, ts.Owner, ts.Created.Format(time.RFC3339))
	}
	w.Flush()
	return b.String()
}
