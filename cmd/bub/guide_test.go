package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/spawner"
)

// guideStep is one command of a guide walkthrough (docs/guide/) and the
// output the guide shows for it ("" when it shows none).
type guideStep struct {
	args []string // after bin/bub
	want string
}

// guideSection returns the text of docs/guide/page under heading (a whole
// line, such as "## Securing the bus"), up to the next heading of the
// same or a higher level.
func guideSection(t *testing.T, page, heading string) string {
	t.Helper()
	return docSection(t, filepath.Join("docs/guide", page), heading)
}

// docSection is guideSection for any document of the repository, by its
// path from the repository's root (README.md).
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("../..", path))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", path, heading)
	}
	level, _, _ := strings.Cut(heading, " ")
	for l := len(level); l >= 2; l-- {
		section, _, _ = strings.Cut(section, "\n"+strings.Repeat("#", l)+" ")
	}
	return section
}

// guideSteps returns the bin/bub commands of the guide's section under
// heading, in order, each with the output block that follows its ```sh
// block (the output of the block's last command).
func guideSteps(t *testing.T, page, heading string) []guideStep {
	t.Helper()
	section := guideSection(t, page, heading)
	var steps []guideStep
	blocks := strings.Split(section, "```")
	for i := 1; i < len(blocks); i += 2 {
		block := blocks[i]
		if body, isSh := strings.CutPrefix(block, "sh\n"); isSh {
			for _, line := range strings.Split(body, "\n") {
				line, _, _ = strings.Cut(line, "#")
				if words, err := spawner.SplitCommand(line); err == nil && len(words) > 0 && words[0] == "bin/bub" {
					steps = append(steps, guideStep{args: words[1:]})
				}
			}
			continue
		}
		if len(steps) > 0 && strings.TrimSpace(blocks[i-1]) == "" {
			steps[len(steps)-1].want = strings.TrimPrefix(block, "\n")
		}
	}
	return steps
}

// guideVarying matches what differs from run to run in the guide's
// sample output: generated clientIds, message ids, times, and the
// padding of table columns around them.
var guideVarying = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`cli-[0-9a-f]{8}`), "cli-ID"},
	{regexp.MustCompile(`\b[0-9a-f]{12}-[0-9]+\b`), "MESSAGE-ID"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "TIME"},
	{regexp.MustCompile(`[ \t]+`), " "},
}

func guideNormal(s string) string {
	for _, v := range guideVarying {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return strings.TrimSpace(s)
}

// sameAsGuide fails the test when got differs from the guide's want
// beyond what varies from run to run.
func sameAsGuide(t *testing.T, step guideStep, got string) {
	t.Helper()
	if guideNormal(got) != guideNormal(step.want) {
		t.Errorf("bub %s printed\n%s\nthe guide shows\n%s", strings.Join(step.args, " "), got, step.want)
	}
}

// TestDeadLetterGuide runs the guide's "Retries and the dead-letter
// queue" walkthrough as written, with the real binary, and compares what
// each command prints with what the guide shows.
func TestDeadLetterGuide(t *testing.T) {
	t.Parallel()
	steps := guideSteps(t, "02-retries-and-dead-letters.md", "## Retries and the dead-letter queue")
	var sequence []string
	for _, s := range steps {
		sequence = append(sequence, s.args[0]+" "+s.args[1])
	}
	if strings.Join(sequence, ", ") != "listen --topic, send-message --topic, dlq list, dlq show, dlq replay, dlq purge" {
		t.Fatalf("guide walkthrough changed; teach this test its new steps: %q", sequence)
	}
	d := startBus(t, t.TempDir())
	env := []string{"BUB_BUS_URL=" + d.url}

	// The listener that asks for retries; its subscribed line is the
	// guide's.
	retrier := startBub(t, env, steps[0].args...)
	require.Eventually(t, func() bool { return strings.Contains(retrier.stderr.String(), "\n") }, 20*time.Second, 20*time.Millisecond, "the listener's subscribed line")
	sameAsGuide(t, steps[0], retrier.stderr.String())

	out, errOut, code := bub(t, env, "", steps[1].args...)
	if code != 0 {
		t.Fatalf("send-message: exit %d: %s", code, errOut)
	}
	sameAsGuide(t, steps[1], out+errOut)

	// Five deliveries, attempts 1 to 5, then the dead letter.
	for want := 1; want <= 5; want++ {
		select {
		case line := <-retrier.lines:
			var delivery struct{ Attempt int }
			if err := json.Unmarshal([]byte(line), &delivery); err != nil || delivery.Attempt != want {
				t.Fatalf("delivery %d: %q (%v)", want, line, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no attempt %d; listen: %s", want, retrier.stderr)
		}
	}
	require.Eventually(t, func() bool {
		out, _, _ := bub(t, env, "", steps[2].args...)
		return strings.Contains(out, "max_retries")
	}, 20*time.Second, 20*time.Millisecond, "the dead letter")
	out, _, _ = bub(t, env, "", steps[2].args...)
	sameAsGuide(t, steps[2], out)

	// Ctrl-C, and a listener that processes.
	_ = retrier.cmd.Process.Signal(syscall.SIGINT)
	processor := startBub(t, env, "listen", "--topic", "jobs:*")
	require.Eventually(t, func() bool { return strings.Contains(processor.stderr.String(), "answered processed: true") }, 20*time.Second, 20*time.Millisecond, "the processing listener's subscribed line")

	if out, errOut, code := bub(t, env, "", steps[3].args...); code != 0 || !strings.Contains(out, "max_retries") || !strings.Contains(out, `"n": 1`) {
		t.Errorf("dlq show: exit %d:\n%s%s", code, out, errOut)
	}
	out, errOut, code = bub(t, env, "", steps[4].args...)
	if code != 0 {
		t.Fatalf("dlq replay: exit %d: %s%s", code, out, errOut)
	}
	sameAsGuide(t, steps[4], out)
	select {
	case line := <-processor.lines:
		if !strings.Contains(line, `"topic":"jobs:1"`) {
			t.Errorf("the replayed job: %q", line)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the replayed job did not reach the processing listener")
	}
	out, errOut, code = bub(t, env, "", steps[5].args...)
	if code != 0 {
		t.Fatalf("dlq purge: exit %d: %s", code, errOut)
	}
	sameAsGuide(t, steps[5], out)
}

// TestReadmeHello runs the README's "Hello in 60 seconds" as written:
// its listen and send-message against a bus, each output compared with
// the block the README shows for it (the result, then the delivery),
// and the exit status it states.
func TestReadmeHello(t *testing.T) {
	t.Parallel()
	section := docSection(t, "README.md", "## Hello in 60 seconds")
	blocks := strings.Split(section, "```")
	var commands [][]string
	var outputs []string
	for i := 1; i < len(blocks); i += 2 {
		body, isSh := strings.CutPrefix(blocks[i], "sh\n")
		if !isSh {
			outputs = append(outputs, strings.TrimPrefix(blocks[i], "\n"))
			continue
		}
		for _, line := range strings.Split(body, "\n") {
			line, _, _ = strings.Cut(line, "#")
			if words, err := spawner.SplitCommand(line); err == nil && len(words) > 0 {
				commands = append(commands, words)
			}
		}
	}
	if len(commands) != 3 || strings.Join(commands[0], " ") != "make run" || commands[1][1] != "listen" || commands[2][1] != "send-message" || len(outputs) != 2 {
		t.Fatalf("the README's hello changed; teach this test its new steps: %q, %d outputs", commands, len(outputs))
	}
	d := startBus(t, t.TempDir())
	env := []string{"BUB_BUS_URL=" + d.url}
	listener := startBub(t, env, commands[1][1:]...)
	checkfor.Check(t, 20*time.Second, func() error {
		if !strings.Contains(listener.stderr.String(), "subscribed to") {
			return fmt.Errorf("the listener has not said it subscribed: %q", listener.stderr)
		}
		return nil
	})
	out, errOut, code := bub(t, env, "", commands[2][1:]...)
	require.Equal(t, 0, code, "the README says send-message exits 0: %s", errOut)
	sameAsGuide(t, guideStep{args: commands[2][1:], want: outputs[0]}, out)
	select {
	case line := <-listener.lines:
		sameAsGuide(t, guideStep{args: commands[1][1:], want: outputs[1]}, line)
	case <-time.After(20 * time.Second):
		t.Fatalf("the listener printed no delivery: %s", listener.stderr)
	}
}
