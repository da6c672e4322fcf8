package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/bcp/gateway"
	"github.com/bub-bus/bub/internal/redact"
	"github.com/bub-bus/bub/peer"
)

// bcpRuntimeCommands are the bcp subcommands that talk to the bus: the
// gateway daemon and the shell tools agents call (bcp-subscriptions.md's
// recommended pattern for LLM agents). bcp.go dispatches to them.
var bcpRuntimeCommands = map[string]func(ctx context.Context, io stdio, args []string) int{
	"gateway":   runBCPGateway,
	"query":     runBCPQuery,
	"respond":   runBCPRespond,
	"publish":   runBCPPublish,
	"approvals": runBCPApprovals,
	"audit":     runBCPAudit,
}

const bcpRuntimeSynopsis = `  gateway --agents DIR --data-dir DIR [flags]
      Run the BCP gateway: check the agent definitions, connect to the bus
      and carry queries, answers and publishes between agents until stopped.
  query --to READER --spec FILE [--justification TEXT]
      As a Controller ($BUB_AGENT_ID), ask READER; prints the query id.
  respond --query-id ID --response FILE
      As a Reader, answer a query; prints the gateway's verdict.
  publish --subscription ID --controller NAME --response FILE
      As a Reader, publish against a Controller's subscription.
  approvals list | show ID | approve ID | reject ID --reason R | edit ID --summary S
      As an approver, decide Category-3 escalations and summaries.
  audit --data-dir DIR [--channel CONTROLLER/READER] [--since 1h] [--json]
      Print the gateway's audit log; works while the gateway runs.`

// runBCPGateway is bub bcp gateway, a daemon: every flag is also an
// environment variable.
func runBCPGateway(ctx context.Context, io stdio, args []string) int {
	var (
		agents, dataDir, busURL, clientID string
		logLevel, logFormat, approvers    string
		relays                            string
		metricsListen, alertTopic         string
		alertShare                        float64
		approvalTTL                       time.Duration
		maxAttempts                       int
		queryTTL                          time.Duration
		cred                              credentialFlags
	)
	fs := newFlagSet(io, "bcp gateway", "bcp gateway --agents DIR --data-dir DIR [flags]\n\n"+
		"Loads and checks the agent definitions in DIR (as bub bcp check does; any problem stops it),\n"+
		"connects to the bus as --client-id and serves bcp:query and bcp:response until stopped.\n"+
		"Its credential must allow publishing to agent:* and subscribing to bcp:* and\n"+
		"system:client.* (and, with --approvers or --relays, publishing to\nbcp:approval.requested.*, one topic per approver), and publishing to system:bcp.*\nfor its events for operators (budgets, validation failures). The wire contract is in docs/BCP.md.")
	fs.StringVar(&agents, "agents", "", "directory of agent definitions (*.md); an agent's name is its clientId (required)")
	fs.StringVar(&dataDir, "data-dir", "", "directory of the gateway's state: pending queries, budgets, audit log (required)")
	fs.StringVar(&busURL, "bus-url", peer.DefaultBusURL, busURLUsage)
	fs.StringVar(&clientID, "client-id", "bcp-gateway", "clientId of the gateway")
	fs.IntVar(&maxAttempts, "max-attempts", 3, "answers a query may get before invalid ones fail it (validation_failed)")
	fs.DurationVar(&queryTTL, "query-ttl", 10*time.Minute, "how long a query waits for a valid answer before it fails (expired)")
	fs.StringVar(&approvers, "approvers", "", "comma-separated clientIds whose decisions on bcp:approval count; without any, Category 3 is refused")
	fs.StringVar(&relays, "relays", "", "relays that decide for humans not on the bus: NAME=USER1,USER2, several separated by ';' (e.g. telegram=42,43: the Telegram bridge for Telegram users 42 and 43)")
	fs.DurationVar(&approvalTTL, "approval-ttl", time.Hour, "how long an approval waits for a decision before the query fails (expired)")
	fs.Float64Var(&alertShare, "alert-share", 0.8, "share of a channel's budget whose spending in one session publishes a bcp_budget_alert")
	fs.StringVar(&alertTopic, "alert-topic", "alert:bcp.budget", "topic of budget alerts; keep it outside bcp:*, where agents may publish")
	fs.StringVar(&metricsListen, "metrics-listen", "", "address to serve Prometheus /metrics on, e.g. 127.0.0.1:9464 (default: none)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "text", "text or json")
	cred.addFlags(fs)
	bindEnvAs(fs, "approvers", "BUB_BCP_APPROVERS")
	bindEnvAs(fs, "relays", "BUB_BCP_RELAYS")
	bindEnvAs(fs, "alert-share", "BUB_BCP_ALERT_SHARE")
	bindEnvAs(fs, "alert-topic", "BUB_BCP_ALERT_TOPIC")
	bindEnvAs(fs, "metrics-listen", "BUB_BCP_METRICS_LISTEN")
	bindEnvAs(fs, "approval-ttl", "BUB_BCP_APPROVAL_TTL")
	// Named for the gateway where BUB_<FLAG> could be another daemon's
	// setting (bub serve has a --data-dir too).
	bindEnvAs(fs, "agents", "BUB_BCP_AGENTS")
	bindEnvAs(fs, "data-dir", "BUB_BCP_DATA_DIR")
	bindEnvAs(fs, "client-id", "BUB_BCP_CLIENT_ID")
	bindEnvAs(fs, "max-attempts", "BUB_BCP_MAX_ATTEMPTS")
	bindEnvAs(fs, "query-ttl", "BUB_BCP_QUERY_TTL")
	bindAllEnv(fs)
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	switch {
	case fs.NArg() > 0:
		return usagef(io, "bcp gateway", "unexpected argument %q", fs.Arg(0))
	case agents == "":
		return usagef(io, "bcp gateway", "no agent definitions: pass --agents DIR")
	case dataDir == "":
		return usagef(io, "bcp gateway", "no state directory: pass --data-dir DIR (budgets and pending queries must survive a restart)")
	case maxAttempts < 1:
		return usagef(io, "bcp gateway", "--max-attempts %d: want at least 1", maxAttempts)
	case alertShare <= 0 || alertShare > 1:
		return usagef(io, "bcp gateway", "--alert-share %v: want a share in (0, 1]", alertShare)
	case approvalTTL <= 0:
		return usagef(io, "bcp gateway", "--approval-ttl %v: want a positive duration", approvalTTL)
	case queryTTL <= 0:
		return usagef(io, "bcp gateway", "--query-ttl %v: want a positive duration", queryTTL)
	}
	if err := checkBusURL(busURL); err != nil {
		return usagef(io, "bcp gateway", "%v", err)
	}
	relayMap, err := parseRelays(relays)
	if err != nil {
		return usagef(io, "bcp gateway", "--relays: %v", err)
	}
	logger, err := newLogger(io, logLevel, logFormat)
	if err != nil {
		return usagef(io, "bcp gateway", "%v", err)
	}
	token, err := cred.resolve()
	if err != nil {
		return usagef(io, "bcp gateway", "%v", err)
	}
	if info, err := os.Stat(agents); err != nil || !info.IsDir() {
		return errorf(io, "--agents %s: not a directory of agent definitions", agents)
	}
	defs, code := checkedDefinitions(io, agents, bcp.LoadDefinitions, "; not starting")
	if code != 0 {
		return code
	}
	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	g, err := gateway.Start(dialCtx, gateway.Options{
		BusURL: busURL, ClientID: clientID, Token: token, Definitions: defs, DataDir: dataDir,
		MaxAttempts: maxAttempts, QueryTTL: queryTTL, Logger: logger,
		Approvers: splitList(approvers), Relays: relayMap, ApprovalTTL: approvalTTL, AlertShare: alertShare, AlertTopic: alertTopic,
	})
	cancel()
	if err != nil {
		return errorf(io, "%v", dialHint(err, busURL))
	}
	if metricsListen != "" {
		stop, err := serveMetrics(metricsListen, g.MetricsHandler(), logger)
		if err != nil {
			g.Close()
			return errorf(io, "--metrics-listen %s: %v", metricsListen, err)
		}
		defer stop()
	}
	logger.Info("bcp gateway serving", "bus", redact.URLs(busURL), "client_id", clientID, "agents", len(defs), "data_dir", dataDir)
	var ended error
	select {
	case <-ctx.Done():
	case <-g.Done():
		// Taken over, or the credential refused on reconnecting: the
		// gateway can forward nothing more.
		ended = g.Err()
	}
	if err := g.Close(); err != nil {
		return errorf(io, "close: %v", err)
	}
	if ended != nil {
		return errorf(io, "the bus connection ended: %v", dialHint(ended, busURL))
	}
	return 0
}

// bcpVerdict is what the shell tools print: the gateway's ack, as JSON.
type bcpVerdict struct {
	OK        bool   `json:"ok"`
	QueryID   string `json:"query_id,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	Code      string `json:"code,omitempty"`
	Message   string `json:"message"`
}

// bcpSend publishes payload on topic as the agent ($BUB_AGENT_ID, or
// --client-id) and prints the gateway's verdict: exit 0 when it accepted,
// 1 when it refused or did not answer.
func bcpSend(ctx context.Context, io stdio, cf *clientFlags, topic string, payload any, isQuery bool) int {
	if cf.clientID == "" && os.Getenv("BUB_AGENT_ID") == "" {
		// The gateway judges a message by who sent it; a made-up cli-…
		// id is no agent, and the bus or the gateway would refuse it
		// without saying which setting was missing.
		return usagef(io, io.cmd, "who is asking? set BUB_AGENT_ID (the spawner sets it for its agents) or pass --client-id")
	}
	// Publish-only: the agent's own connection stays, and the bus emits
	// no connect event, so this does not start a new session.
	conn, err := cf.dial(ctx, io, peer.Options{PublishOnly: true, NoReconnect: true})
	if err != nil {
		return errorf(io, "%v", err)
	}
	defer conn.Close()
	res, err := conn.SendMessage(ctx, topic, payload, nil)
	if err != nil {
		return errorf(io, "%v", err)
	}
	v := bcpVerdict{MessageID: res.MessageID}
	if isQuery {
		v.MessageID = ""
	}
	switch {
	case len(res.Acks) == 0:
		v.Code, v.Message = "gateway_unavailable", fmt.Sprintf("nothing handled the message on %s (%s): is bub bcp gateway running?", topic, res.Reason)
	case res.Acks[0].Error != "":
		v.Code, v.Message = "gateway_unavailable", "the gateway did not answer: "+res.Acks[0].Error
	default:
		a := res.Acks[0]
		v.OK, v.Message = a.Processed, a.Message
		if isQuery {
			v.QueryID = gateway.QueryIDOf(a.Message)
		}
		if !a.Processed {
			v.Code, _, _ = strings.Cut(a.Message, ":")
		}
	}
	out, _ := json.Marshal(v)
	fmt.Fprintln(io.out, string(out))
	if !v.OK {
		return 1
	}
	return 0
}

// readJSONObject reads a JSON object from path ("-" is stdin) for a
// --spec or --response flag.
func readJSONObject(io stdio, flagName, path string) (map[string]json.RawMessage, error) {
	data, err := readBCPInput(io, path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flagName, err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("--%s %s: not a JSON object", flagName, path)
	}
	return obj, nil
}

func runBCPQuery(ctx context.Context, io stdio, args []string) int {
	var cf clientFlags
	var to, specFile, justification string
	fs := newFlagSet(io, "bcp query", "bcp query --to READER --spec FILE [--justification TEXT]\n\n"+
		"Sends a bcp_query_request on bcp:query as $BUB_AGENT_ID (or --client-id) and prints\n"+
		`{"ok", "query_id", "message"} or {"ok": false, "code", "message"}. The answer comes`+"\n"+
		"later, as bcp_response_delivery or bcp_query_failed on agent:{you}. \"-\" reads stdin.")
	fs.StringVar(&to, "to", "", "the Reader to ask (required)")
	fs.StringVar(&specFile, "spec", "", "file holding the query spec: category and fields, questions or directive (required)")
	fs.StringVar(&justification, "justification", "", "why a lower category will not do (Category 3)")
	cf.addFlags(fs)
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if to == "" || specFile == "" || fs.NArg() > 0 {
		return usagef(io, "bcp query", "pass --to READER and --spec FILE, and nothing else")
	}
	spec, err := readJSONObject(io, "spec", specFile)
	if err != nil {
		return usagef(io, "bcp query", "%v", err)
	}
	for _, k := range []string{"type", "target", "justification"} {
		if _, ok := spec[k]; ok {
			return usagef(io, "bcp query", "--spec %s: %q belongs to the request, not the spec; use the flags", specFile, k)
		}
	}
	spec["type"], _ = json.Marshal(gateway.TypeQueryRequest)
	spec["target"], _ = json.Marshal(to)
	if justification != "" {
		spec["justification"], _ = json.Marshal(justification)
	}
	return bcpSend(ctx, io, &cf, gateway.TopicQuery, spec, true)
}

func runBCPRespond(ctx context.Context, io stdio, args []string) int {
	var cf clientFlags
	var queryID, responseFile string
	fs := newFlagSet(io, "bcp respond", "bcp respond --query-id ID --response FILE\n\n"+
		"Answers a query with the JSON object in FILE (\"-\" reads stdin), as $BUB_AGENT_ID, and prints\n"+
		"the gateway's verdict: {\"ok\": true, ...} once validated and delivered, or the rejection's code.")
	fs.StringVar(&queryID, "query-id", "", "the query_id of the bcp_query (required)")
	fs.StringVar(&responseFile, "response", "", "file holding the response object (required)")
	cf.addFlags(fs)
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if queryID == "" || responseFile == "" || fs.NArg() > 0 {
		return usagef(io, "bcp respond", "pass --query-id ID and --response FILE, and nothing else")
	}
	resp, err := readJSONObject(io, "response", responseFile)
	if err != nil {
		return usagef(io, "bcp respond", "%v", err)
	}
	payload := map[string]any{"type": gateway.TypeResponse, "query_id": queryID, "response": resp}
	return bcpSend(ctx, io, &cf, gateway.TopicResponse, payload, false)
}

func runBCPPublish(ctx context.Context, io stdio, args []string) int {
	var cf clientFlags
	var subscription, controller, responseFile string
	fs := newFlagSet(io, "bcp publish", "bcp publish --subscription ID --controller NAME --response FILE\n\n"+
		"Publishes the JSON object in FILE (\"-\" reads stdin) against NAME's subscription ID, as\n"+
		"$BUB_AGENT_ID, and prints the gateway's verdict.")
	fs.StringVar(&subscription, "subscription", "", "the subscription's id (required)")
	fs.StringVar(&controller, "controller", "", "the Controller that declared it (required)")
	fs.StringVar(&responseFile, "response", "", "file holding the response object (required)")
	cf.addFlags(fs)
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if subscription == "" || controller == "" || responseFile == "" || fs.NArg() > 0 {
		return usagef(io, "bcp publish", "pass --subscription ID, --controller NAME and --response FILE, and nothing else")
	}
	resp, err := readJSONObject(io, "response", responseFile)
	if err != nil {
		return usagef(io, "bcp publish", "%v", err)
	}
	payload := map[string]any{"type": gateway.TypeResponse, "subscription_id": subscription, "controller": controller, "response": resp}
	return bcpSend(ctx, io, &cf, gateway.TopicResponse, payload, false)
}
