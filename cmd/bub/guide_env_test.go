package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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

// TestGuideNamesEveryVariable: every variable a command's --help names
// is in the guide's table of settings from the environment, by name or
// by its family (BUB_TELEGRAM_<FLAG>; BUB_<FLAG> only for serve and
// spawner, whose rows say so), and bub --help names every command that
// has settings of its own there.
func TestGuideNamesEveryVariable(t *testing.T) {
	table := guideSection(t, "10-reference.md", "### Settings from the environment")
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
	read := map[string]bool{} // every variable some command's --help names
	for _, command := range helpCommands {
		var out bytes.Buffer
		if code := run(t.Context(), stdio{in: strings.NewReader(""), out: &out, err: &out}, append(strings.Fields(command), "--help")); code != 0 {
			t.Fatalf("bub %s --help: exit %d\n%s", command, code, out.String())
		}
		for _, name := range helpVariable.FindAllString(out.String(), -1) {
			read[name] = true // what the help's text names (BUB_TELEGRAM_TOKEN)
		}
		own := 0
		for _, f := range helpFlags(out.String()) {
			if f.env == "" {
				continue
			}
			read[f.env] = true // what the flag list names
			if !commonVariables[f.env] {
				own++
			}
			covered := names[f.env] || (command == "serve" || command == "spawner") && f.env == envName(f.name)
			for _, prefix := range families {
				covered = covered || strings.HasPrefix(f.env, prefix)
			}
			if !covered {
				t.Errorf("bub %s --%s reads %s, which the guide's Settings from the environment does not name", command, f.name, f.env)
			}
		}
		if own > 2 && !strings.Contains(environment, command) {
			t.Errorf("bub %s has %d settings of its own in the environment, and bub --help's word on the environment does not name it: %s", command, own, environment)
		}
	}
	// And the other way: the table names no variable that nothing reads.
	for _, m := range readmeVariable.FindAllStringSubmatch(rows(table), -1) {
		if name := m[1]; m[2] == "" && !read[name] {
			t.Errorf("the guide's Settings from the environment names %s, which no command's --help names", name)
		}
	}
}

// helpVariable is a variable named in a --help text.
var helpVariable = regexp.MustCompile(`BUB_[A-Z_]*[A-Z]`)

// rows returns the lines of a markdown table in text.
func rows(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "|") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// commandRow is a row of the guide's Commands table: `bub NAME a\|b ...`.
var commandRow = regexp.MustCompile("(?m)^\\| `bub ([a-z0-9-]+)((?: [a-z-]+(?:\\\\\\|[a-z-]+)+)?)[^`]*` \\|")

// TestGuideCommandsTable: the Commands table of docs/guide/10-reference.md
// lists every command bub --help lists and no other (it once left out
// subscriptions), and every subcommand a row names (dlq list|show|...)
// is one the command's --help names.
func TestGuideCommandsTable(t *testing.T) {
	t.Parallel()
	table := guideSection(t, "10-reference.md", "## Commands")
	listed := map[string]bool{}
	for _, m := range commandRow.FindAllStringSubmatch(table, -1) {
		name := m[1]
		listed[name] = true
		if _, ok := commands[name]; !ok {
			t.Errorf("the Commands table lists bub %s, which bub --help does not", name)
			continue
		}
		var help bytes.Buffer
		run(t.Context(), stdio{in: strings.NewReader(""), out: &help, err: &help}, []string{name, "--help"})
		for _, sub := range strings.Split(strings.TrimSpace(m[2]), `\|`) {
			if sub != "" && !regexp.MustCompile(`(^|[\s<|])`+sub+`([\s>|]|$)`).MatchString(help.String()) {
				t.Errorf("the Commands table names bub %s %s, which bub %s --help does not:\n%s", name, sub, name, help.String())
			}
		}
	}
	for name := range commands {
		if !listed[name] {
			t.Errorf("bub --help lists %s, which the Commands table of docs/guide/10-reference.md does not", name)
		}
	}
}

// imageClaim is a document's word on the image's size.
var imageClaim = regexp.MustCompile(`FROM scratch\x60,? \(?about (\d+) MB`)

// TestGuideImageSize: the image size the guide states is the size of what
// the image holds, the two binaries make image-binaries builds (the
// guide said about 33 MB of an image of 43). It builds them as the
// Makefile does, which takes minutes on a cold cache: not with -short.
func TestGuideImageSize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image's binaries")
	}
	t.Parallel()
	var claims []int
	for _, text := range []string{guideSection(t, "08-running-it.md", "## Run the whole stack"), docSection(t, "docs/OPERATIONS.md", "### The image")} {
		m := imageClaim.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no \"FROM scratch`, about N MB\" or \"FROM scratch` (about N MB\" in:\n%s\nteach this test its new words", text)
		}
		n, _ := strconv.Atoi(m[1])
		claims = append(claims, n)
	}
	dir := t.TempDir()
	var total int64
	for name, pkg := range map[string]string{"bub": ".", "echo-agent": "../../examples/echo-agent"} {
		out := filepath.Join(dir, name)
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, msg)
		}
		fi, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	actual := float64(total) / 1e6 // docker image ls counts MB of 10^6 bytes
	for _, claimed := range claims {
		if d := float64(claimed) - actual; d > actual/10 || -d > actual/10 {
			t.Errorf("the docs say the image is about %d MB; its binaries are %.1f MB", claimed, actual)
		}
	}
}
