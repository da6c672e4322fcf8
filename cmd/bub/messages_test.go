package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestMessagesSayWhatWasWrong runs the real binary as a newcomer would,
// with the mistakes a newcomer makes, and checks that the one line on
// stderr says what was wrong, where, and what to do.
func TestMessagesSayWhatWasWrong(t *testing.T) {
	t.Setenv("BUB_BUS_URL", "")
	dead := "ws://" + freeAddr(t) + "/"
	tests := []struct {
		name string
		env  []string
		args []string
		code int
		want []string
	}{
		{"duration without a unit", nil, []string{"send-message", "--topic", "t", "--payload", `{"type":"x"}`, "--timeout", "5"},
			2, []string{"bub send-message: ", `--timeout "5"`, "5s"}},
		{"bad number in the environment", []string{"BUB_MAX_ATTEMPTS=abc"}, []string{"serve", "--data-dir", t.TempDir()},
			2, []string{"bub serve: ", `BUB_MAX_ATTEMPTS="abc"`, "--max-attempts", "whole number"}},
		{"bus URL without a scheme", nil, []string{"send-message", "--bus-url", "127.0.0.1:7892", "--topic", "t", "--payload", `{"type":"x"}`},
			1, []string{"bub send-message: ", "ws://127.0.0.1:7892/"}},
		{"bus URL with an empty port", nil, []string{"send-message", "--bus-url", "ws://127.0.0.1:/", "--topic", "t", "--payload", `{"type":"x"}`},
			1, []string{"bub send-message: ", `"ws://127.0.0.1:/" (--bus-url or BUB_BUS_URL) has an empty port; did you mean ws://127.0.0.1:7892/?`}},
		{"bus URL with a password and an empty port", nil, []string{"send-message", "--bus-url", "ws://alice:s3cret@127.0.0.1:/", "--topic", "t", "--payload", `{"type":"x"}`},
			1, []string{"bub send-message: ", `"ws://127.0.0.1:/" (--bus-url or BUB_BUS_URL) has an empty port; did you mean ws://127.0.0.1:7892/?`}},
		{"bus URL with a password, not a WebSocket URL", nil, []string{"send-message", "--bus-url", "ws://a/,http://alice:s3cret@127.0.0.1:7892", "--topic", "t", "--payload", `{"type":"x"}`},
			1, []string{"bub send-message: ", `("http://127.0.0.1:7892") in "ws://a/,http://127.0.0.1:7892"`, "did you mean ws://127.0.0.1:7892/?"}},
		{"route with a password", nil, []string{"serve", "--data-dir", t.TempDir(), "--cluster-name", "c", "--node-id", "n1", "--nats-routes", "http://bob:s3cret@n2:6222"},
			2, []string{"bub serve: ", `"http://n2:6222"`}},
		{"healthcheck URL with a password", nil, []string{"healthcheck", "--url", "ftp://alice:s3cret@h/"},
			2, []string{"bub healthcheck: ", `"ftp://h/"`}},
		{"nothing listens, with a password", nil, []string{"send-message", "--bus-url", strings.Replace(dead, "ws://", "ws://alice:s3cret@", 1), "--topic", "t", "--payload", `{"type":"x"}`},
			1, []string{"bub send-message: ", "check that bub serve runs at " + dead}},
		{"spawner with nothing listening", nil, []string{"spawner", "--bus-url", dead, "--command", "true", "--workspace-root", t.TempDir()},
			1, []string{"bub spawner: ", "check that bub serve runs at " + dead}},
		{"bcp gateway with nothing listening", nil, []string{"bcp", "gateway", "--bus-url", dead, "--agents", "../../examples/agents", "--data-dir", t.TempDir()},
			1, []string{"bub bcp gateway: ", "check that bub serve runs at " + dead}},
		{"bcp gateway with nothing listening, with a password", nil, []string{"bcp", "gateway", "--bus-url", strings.Replace(dead, "ws://", "ws://alice:s3cret@", 1), "--agents", "../../examples/agents", "--data-dir", t.TempDir()},
			1, []string{"bub bcp gateway: ", "connect to " + dead}},
		{"bcp query without an agent id", []string{"BUB_AGENT_ID=", "BUB_BUS_URL=" + dead}, []string{"bcp", "query", "--to", "researcher", "--spec", writeFile(t, t.TempDir(), "spec.json", `{"category":1}`)},
			2, []string{"bub bcp query: ", "set BUB_AGENT_ID", "--client-id"}},
		{"nothing listens", nil, []string{"send-message", "--bus-url", dead, "--topic", "t", "--payload", `{"type":"x"}`},
			1, []string{"bub send-message: ", "connection refused", "check that bub serve runs at " + dead}},
		{"unknown flag", nil, []string{"listen", "--pattern", "x"},
			2, []string{"bub listen: unknown flag --pattern", "bub listen --help"}},
		{"flag without its value", nil, []string{"listen", "--topic"},
			2, []string{"bub listen: --topic needs a value"}},
		{"bcp validate without --response", nil, []string{"bcp", "validate", "--query", "q.json"},
			2, []string{"bub bcp validate: no --response"}},
		{"dlq purge without arguments", []string{"BUB_BUS_URL=" + dead}, []string{"dlq", "purge"},
			2, []string{"bub dlq purge: ", "--all"}},
		{"dlq purge of an id with --all", []string{"BUB_BUS_URL=" + dead}, []string{"dlq", "purge", "d-7", "--all"},
			2, []string{"bub dlq purge: ", `not "d-7" with --all`}},
		{"dlq purge of an id with filters", []string{"BUB_BUS_URL=" + dead}, []string{"dlq", "purge", "--reason", "max_retries", "d-8", "--since", "1h"},
			2, []string{"bub dlq purge: ", `not "d-8" with --reason and --since`}},
		{"dlq error", nil, []string{"dlq", "list", "--bus-url", dead},
			1, []string{"bub dlq list: "}},
		{"listen error", nil, []string{"listen", "--bus-url", dead, "--topic", "t"},
			1, []string{"bub listen: "}},
	}
	// One form everywhere: "bub COMMAND: ...", never "bub: COMMAND: ...".
	prefix := regexp.MustCompile(`^bub [a-z-]+( [a-z]+)?: `)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := bub(t, tt.env, "", tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d: %s", code, tt.code, stderr)
			}
			if strings.Count(stderr, "\n") != 1 || !prefix.MatchString(stderr) || strings.HasPrefix(stderr, "bub: ") {
				t.Errorf("want one line starting bub COMMAND: , got %q", stderr)
			}
			for _, want := range tt.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q does not say %q", stderr, want)
				}
			}
			if strings.Contains(stderr, "s3cret") {
				t.Errorf("stderr %q shows the URL's password", stderr)
			}
			if strings.Contains(stderr, "parse error") {
				t.Errorf("stderr %q says only parse error", stderr)
			}
		})
	}
}

// TestVersionFlag: bub --version is what people type; it must not be an
// unknown command. bub version takes no flags or arguments, and says so.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	out, stderr, code := bub(t, nil, "", "--version")
	want, _, _ := bub(t, nil, "", "version")
	if code != 0 || out == "" || out != want {
		t.Errorf("bub --version: exit %d, stdout %q (bub version: %q), stderr %q", code, out, want, stderr)
	}
	for _, args := range [][]string{{"version", "--bogus"}, {"version", "extra"}} {
		out, stderr, code := bub(t, nil, "", args...)
		if code != 2 || out != "" || !strings.HasPrefix(stderr, "bub version: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("bub %s: exit %d, stdout %q, stderr %q; want exit 2 and one line saying what was wrong", strings.Join(args, " "), code, out, stderr)
		}
	}
}

// TestHelpGoesToStdout: help that was asked for is the command's output,
// so that "bub serve --help | grep tls" finds something; help printed
// for a mistake stays on stderr, with exit status 2.
func TestHelpGoesToStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"serve", "--help"}, {"auth", "--help"}, {"dlq", "--help"}, {"bcp", "--help"}, {"version", "--help"}} {
		code, stdout, stderr := runBub(t, "", args...)
		if code != 0 || !strings.Contains(stdout, "Usage: bub") || stderr != "" {
			t.Errorf("bub %s: exit %d, stdout %.40q, stderr %.40q; want the usage on stdout", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{}, {"dlq"}, {"auth"}, {"bcp"}} {
		code, stdout, stderr := runBub(t, "", args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "Usage: bub") {
			t.Errorf("bub %s: exit %d, stdout %.40q, stderr %.40q; want the usage on stderr", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	// The auth subcommands' flags are per-invocation arguments: no
	// variable sets them, so the help must not name one.
	_, help, _ := runBub(t, "", "auth", "--help")
	for _, unread := range []string{"BUB_ADMIN", "BUB_CLIENT_ID", "BUB_TTL", "BUB_OUT", "env "} {
		if strings.Contains(help, unread) {
			t.Errorf("bub auth --help names %q, which bub does not read:\n%s", unread, help)
		}
	}
}

// TestSubcommandHelp: each dlq subcommand's --help is its own, not the
// general text repeated.
func TestSubcommandHelp(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, sub := range []string{"list", "show", "replay", "purge"} {
		help, _, code := bub(t, nil, "", "dlq", sub, "--help")
		if code != 0 || !strings.HasPrefix(help, "Usage: bub dlq "+sub) {
			t.Errorf("bub dlq %s --help: exit %d, %q", sub, code, help)
		}
		for other, text := range seen {
			if text == help {
				t.Errorf("bub dlq %s --help repeats bub dlq %s --help", sub, other)
			}
		}
		seen[sub] = help
	}
	if help, _, _ := bub(t, nil, "", "dlq", "show", "--help"); strings.Contains(help, "purge") {
		t.Errorf("bub dlq show --help talks about purge:\n%s", help)
	}
}

// TestSpawnerHelpShowsFullPaths: agents start in their workspace, so the
// help's examples must give script paths in full and say why.
func TestSpawnerHelpShowsFullPaths(t *testing.T) {
	t.Parallel()
	help, _, _ := bub(t, nil, "", "spawner", "--help")
	for _, m := range regexp.MustCompile(`python3 (\S+\.py)`).FindAllStringSubmatch(help, -1) {
		path := m[1]
		if !strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "$PWD/") && !strings.Contains(help, "not \"python3 "+path) {
			t.Errorf("spawner --help shows %q with a relative script path", m[0])
		}
	}
	if !strings.Contains(help, "workspace, so a relative path") {
		t.Errorf("spawner --help does not say why paths must be in full:\n%s", help)
	}
}

// TestDaemonsNameTheRefusedToken: the spawner and the BCP gateway, whose
// token the bus refuses, say which settings to check, as listen does.
func TestDaemonsNameTheRefusedToken(t *testing.T) {
	url := startBCPBus(t)
	for _, args := range [][]string{
		{"spawner", "--command", "true", "--workspace-root", t.TempDir()},
		{"bcp", "gateway", "--agents", "../../examples/agents", "--data-dir", t.TempDir()},
		{"listen", "--topic", "t"},
	} {
		code, _, stderr := runBub(t, "", append(args, "--bus-url", url, "--token", "wrong-token")...)
		if code != 1 || !strings.Contains(stderr, "check --token, --token-file or BUB_TOKEN") || strings.Contains(stderr, "wrong-token") {
			t.Errorf("bub %s with a refused token: exit %d, stderr %q", args[0], code, stderr)
		}
	}
}
