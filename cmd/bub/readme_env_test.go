package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// helpCommands is every command and subcommand with a --help of its own.
var helpCommands = []string{
	"serve", "listen", "send-message", "dlq list", "dlq show", "dlq replay", "dlq purge",
	"spawner", "telegram", "bcp check", "bcp validate", "bcp gateway", "bcp query", "bcp respond",
	"bcp publish", "bcp approvals", "bcp audit", "mcp", "auth keygen", "auth issue",
	"healthcheck", "backup", "restore", "version",
}

// commonVariables are the bus and credential variables that every client
// command takes; the rest of a command's variables are its own settings.
var commonVariables = map[string]bool{
	"BUB_BUS_URL": true, "BUB_TOKEN": true, "BUB_TOKEN_FILE": true,
	"BUB_LOG_LEVEL": true, "BUB_LOG_FORMAT": true,
}

// readmeVariable is a variable name, or a BUB_..._<FLAG> family, in
// backquotes.
var readmeVariable = regexp.MustCompile("`(BUB_[A-Z_]*(<FLAG>)?)`")

// TestReadmeNamesEveryVariable: every variable a command's --help names
// is in the README's table of settings from the environment, by name or
// by its family (BUB_TELEGRAM_<FLAG>; BUB_<FLAG> only for serve and
// spawner, whose rows say so), and bub --help names every command that
// has settings of its own there.
func TestReadmeNamesEveryVariable(t *testing.T) {
	table := readmeSection(t, "### Settings from the environment")
	names := map[string]bool{}
	var families []string
	for _, m := range readmeVariable.FindAllStringSubmatch(table, -1) {
		if m[2] == "" {
			names[m[1]] = true
		} else if prefix := strings.TrimSuffix(m[1], "<FLAG>"); prefix != "BUB_" {
			families = append(families, prefix)
		}
	}
	var top bytes.Buffer
	usage(&top)
	_, environment, ok := strings.Cut(top.String(), "The environment")
	if !ok {
		t.Fatalf("bub --help says nothing of the environment:\n%s", top.String())
	}
	environment = strings.Join(strings.Fields(environment), " ")
	for _, command := range helpCommands {
		var out bytes.Buffer
		if code := run(t.Context(), stdio{in: strings.NewReader(""), out: &out, err: &out}, append(strings.Fields(command), "--help")); code != 0 {
			t.Fatalf("bub %s --help: exit %d\n%s", command, code, out.String())
		}
		own := 0
		for _, f := range helpFlags(out.String()) {
			if f.env == "" {
				continue
			}
			if !commonVariables[f.env] {
				own++
			}
			covered := names[f.env] || (command == "serve" || command == "spawner") && f.env == envName(f.name)
			for _, prefix := range families {
				covered = covered || strings.HasPrefix(f.env, prefix)
			}
			if !covered {
				t.Errorf("bub %s --%s reads %s, which the README's Settings from the environment does not name", command, f.name, f.env)
			}
		}
		if own > 2 && !strings.Contains(environment, command) {
			t.Errorf("bub %s has %d settings of its own in the environment, and bub --help's word on the environment does not name it: %s", command, own, environment)
		}
	}
}
