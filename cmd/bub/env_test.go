package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/protocol"
)

// TestEnvBinding: a bound flag's variable sets it, the command line wins
// over it, a bad value names the variable, the flag and the form wanted,
// and an unbound flag ignores its would-be variable.
func TestEnvBinding(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    time.Duration
		wantErr []string
	}{
		{"default", nil, nil, time.Second, nil},
		{"from the environment", map[string]string{"BUB_DELIVERY_TIMEOUT": "5s"}, nil, 5 * time.Second, nil},
		{"command line wins", map[string]string{"BUB_DELIVERY_TIMEOUT": "5s"}, []string{"--delivery-timeout", "7s"}, 7 * time.Second, nil},
		{"bad variable", map[string]string{"BUB_DELIVERY_TIMEOUT": "soon"}, nil, 0, []string{"BUB_DELIVERY_TIMEOUT", "--delivery-timeout", "5s"}},
		{"bad flag", nil, []string{"--delivery-timeout", "5"}, 0, []string{`--delivery-timeout "5"`, "duration", "5s"}},
		{"unbound flag ignores the environment", map[string]string{"BUB_TOPIC": "x:*", "BUB_ALL": "true"}, nil, time.Second, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var errOut bytes.Buffer
			std := stdio{out: &bytes.Buffer{}, err: &errOut}
			fs := newFlagSet(std, "test", "test")
			d := fs.Duration("delivery-timeout", time.Second, "")
			bindEnv(fs, "delivery-timeout")
			topic := fs.String("topic", "", "")
			all := fs.Bool("all", false, "")
			code, ok := parseFlags(fs, std, tt.args)
			if tt.wantErr != nil {
				if ok || code != 2 || strings.Count(errOut.String(), "\n") != 1 {
					t.Fatalf("ok %v, code %d, stderr %q", ok, code, errOut.String())
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(errOut.String(), want) {
						t.Errorf("stderr %q does not say %q", errOut.String(), want)
					}
				}
				return
			}
			if !ok || *d != tt.want || *topic != "" || *all {
				t.Fatalf("ok %v, value %s (want %s), topic %q, all %v (stderr %q)", ok, *d, tt.want, *topic, *all, errOut.String())
			}
		})
	}
}

// boundVariables are the only environment variables bub's flags read:
// where the bus is, and the daemons' settings. Anything else is a flag
// of one invocation. A new entry here is a decision, not a side effect.
var boundVariables = map[string][]string{
	"send-message": {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"listen":       {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE", "BUB_RETRY_UNAUTHORIZED"}, // keep reconnecting on a refused credential: set once
	"dlq list":     {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"dlq show":     {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"dlq replay":   {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"dlq purge":    {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},

	"subscriptions list":   {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"subscriptions remove": {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"bcp check":            {},
	"bcp validate":         {},
	"version":              {},
	"auth":                 {}, // one help for every auth subcommand
	"auth keygen":          {},
	"auth issue":           {},
	// Tool subscriptions, an agent's (or an admin's).
	"tool-subscriptions start":  {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"tool-subscriptions list":   {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"tool-subscriptions cancel": {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},

	// Webhook subscriptions, an admin's.
	"webhook add":    {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"webhook remove": {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"webhook list":   {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},

	"spawner": {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE", "BUB_ISSUER_KEY", "BUB_ISSUER_NAME", "BUB_AGENT_TOKEN_TTL",
		"BUB_AGENT_PUBLISH", "BUB_AGENT_SUBSCRIBE", "BUB_AGENT_DURABLE", "BUB_SPAWNER_CLIENT_ID", "BUB_SPAWNER_COMMAND", "BUB_SPAWNER_PATTERNS",
		"BUB_WORKSPACE_ROOT", "BUB_SPAWN_TIMEOUT", "BUB_MAX_AGENTS", "BUB_RESTART_DELAY", "BUB_RESTART_DELAY_MAX",
		"BUB_MAX_RESTARTS", "BUB_STOP_TIMEOUT", "BUB_LOG_LEVEL", "BUB_LOG_FORMAT",
		"BUB_IDLE_TIMEOUT", "BUB_SPAWNER_DATA_DIR", "BUB_SPAWNER_METRICS_LISTEN"},
	// The bridge's own settings are BUB_TELEGRAM_*: BUB_LISTEN and
	// BUB_DATA_DIR are bub serve's.
	"telegram": {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE", "BUB_LOG_LEVEL", "BUB_LOG_FORMAT",
		"BUB_TELEGRAM_CLIENT_ID", "BUB_TELEGRAM_BOT_TOKEN_FILE", "BUB_TELEGRAM_API_URL", "BUB_TELEGRAM_DATA_DIR",
		"BUB_TELEGRAM_ALLOW_CHATS", "BUB_TELEGRAM_ALLOW_USERS", "BUB_TELEGRAM_GROUP_MODE", "BUB_TELEGRAM_POLL_TIMEOUT",
		"BUB_TELEGRAM_WEBHOOK_URL", "BUB_TELEGRAM_WEBHOOK_SECRET_FILE", "BUB_TELEGRAM_LISTEN", "BUB_TELEGRAM_TYPING_MAX",
		"BUB_TELEGRAM_APPROVER_CHAT", "BUB_TELEGRAM_APPROVERS", "BUB_TELEGRAM_BCP_GATEWAY_ID"},
	// Issue 38's brief: every flag of a2a call has a variable, under
	// BUB_A2A_ so that none means something else to another command.
	"a2a call": {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE", "BUB_A2A_AGENT", "BUB_A2A_AGENT_TOKEN", "BUB_A2A_AGENT_TOKEN_FILE",
		"BUB_A2A_TEXT", "BUB_A2A_MESSAGE", "BUB_A2A_TASK_ID", "BUB_A2A_CONTEXT_ID", "BUB_A2A_PUBLISH", "BUB_A2A_NO_STREAM", "BUB_A2A_TIMEOUT"},
	"backup":      {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"trace":       {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"tail":        {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE"},
	"mcp":         {"BUB_BUS_URL", "BUB_TOKEN", "BUB_TOKEN_FILE", "BUB_MCP_CLIENT_ID", "BUB_MCP_LISTEN", "BUB_MCP_LISTEN_TOKEN_FILE", "BUB_MCP_LISTEN_INSECURE", "BUB_RETRY_UNAUTHORIZED"},
	"restore":     {"BUB_DATA_DIR"},        // the bus's own, for the same directory
	"healthcheck": {"BUB_HEALTHCHECK_URL"}, // set once per deployment; the image's HEALTHCHECK stays the same
	"serve":       nil,                     // every flag: checked below
}

// TestHelpNamesBoundVariables: each command's --help, on stdout since it
// was asked for, names the variable of exactly the bound flags, and those
// are the ones listed above.
func TestHelpNamesBoundVariables(t *testing.T) {
	seen := map[string]bool{}
	for command, want := range boundVariables {
		seen[strings.Fields(command)[0]] = true
		var out, errOut bytes.Buffer
		code := run(t.Context(), stdio{in: strings.NewReader(""), out: &out, err: &errOut}, append(strings.Fields(command), "--help"))
		if code != 0 || errOut.Len() > 0 || !strings.HasPrefix(out.String(), "Usage: bub ") {
			t.Errorf("bub %s --help: exit %d, want the usage on stdout and nothing on stderr; stdout %q, stderr %q", command, code, out.String(), errOut.String())
		}
		var got []string
		flags := helpFlags(out.String())
		for _, f := range flags {
			if f.env == "" {
				if want == nil {
					t.Errorf("bub %s --help: --%s is a daemon's setting but names no variable", command, f.name)
				}
				continue
			}
			got = append(got, f.env)
			if want == nil && f.env != envName(f.name) {
				t.Errorf("bub %s --help: --%s is bound to %s, want %s", command, f.name, f.env, envName(f.name))
			}
		}
		if len(flags) == 0 && command != "version" && command != "bcp check" {
			t.Errorf("bub %s --help lists no flags:\n%s", command, out.String())
		}
		if want != nil {
			slices.Sort(got)
			want = slices.Sorted(slices.Values(want))
			if !slices.Equal(got, want) {
				t.Errorf("bub %s binds %v, want %v", command, got, want)
			}
		}
	}
	for name := range commands {
		if !seen[name] {
			t.Errorf("bub %s: not in boundVariables; decide which of its flags a deployment sets", name)
		}
	}
}

// helpFlag is a flag as a --help lists it: its name and, when bound,
// its variable.
type helpFlag struct{ name, env string }

// helpFlags reads the flags out of a command's --help.
func helpFlags(help string) []helpFlag {
	var flags []helpFlag
	for _, line := range strings.Split(help, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(line, "--"), " ")
		_, env, bound := strings.Cut(line, "(env ")
		if bound {
			env, _, _ = strings.Cut(env, ",")
			env = strings.TrimSuffix(env, ")")
		}
		flags = append(flags, helpFlag{name, env})
	}
	return flags
}

// TestPerInvocationFlagsIgnoreTheEnvironment, with the real binary: the
// variables that once made dlq list filter by a stale topic and dlq purge
// purge everything no longer do anything.
func TestPerInvocationFlagsIgnoreTheEnvironment(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir(), "--max-attempts", "1")
	deadLetter(t, d.url, "jobs:1")
	env := []string{"BUB_BUS_URL=" + d.url, "BUB_TOPIC=inbound:*", "BUB_ALL=true", "BUB_JSON=true", "BUB_LIMIT=0"}
	out, errOut, code := bub(t, env, "", "dlq", "list")
	if code != 0 || !strings.Contains(out, "jobs:1") {
		t.Errorf("dlq list with BUB_TOPIC set: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = bub(t, env, "", "dlq", "purge")
	if code != 2 || strings.Contains(out, "purged") || !strings.Contains(errOut, "--all") {
		t.Errorf("dlq purge with BUB_ALL=true: exit %d, stdout %q, stderr %q; want a refusal naming --all", code, out, errOut)
	}
	if out, _, _ := bub(t, env, "", "dlq", "list"); !strings.Contains(out, "jobs:1") {
		t.Errorf("the dead letter is gone after a refused purge: %q", out)
	}
}

// deadLetter has a subscriber on url refuse a message to topic, so that
// a bus with --max-attempts 1 dead-letters it.
func deadLetter(t *testing.T, url, topic string) {
	t.Helper()
	worker := bustest.Connect(t, url, "refuser", func(protocol.ProcessMessageParams) any {
		return protocol.ProcessMessageResult{ShouldRetry: true, Message: "busy"}
	})
	worker.Subscribe(topic, "")
	bustest.Connect(t, url, "pub", nil).Publish(topic, "job")
	checkfor.Check(t, 10*time.Second, func() error {
		if out, _, _ := bub(t, []string{"BUB_BUS_URL=" + url}, "", "dlq", "list"); !strings.Contains(out, topic) {
			return fmt.Errorf("no dead letter for %s: %s", topic, out)
		}
		return nil
	})
}
