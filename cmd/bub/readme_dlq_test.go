package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/spawner"
)

// readmeStep is one command of a README walkthrough and the output the
// README shows for it ("" when it shows none).
type readmeStep struct {
	args []string // after bin/bub
	want string
}

// readmeSection returns the README's text under heading (a whole line,
// such as "## Securing the bus"), up to the next "## " heading.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), heading+"\n")
	if !ok {
		t.Fatalf("README has no %q section", heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// readmeSteps returns the bin/bub commands of the README section under
// heading, in order, each with the output block that follows its ```sh
// block (the output of the block's last command).
func readmeSteps(t *testing.T, heading string) []readmeStep {
	t.Helper()
	section := readmeSection(t, heading)
	var steps []readmeStep
	blocks := strings.Split(section, "```")
	for i := 1; i < len(blocks); i += 2 {
		block := blocks[i]
		if body, isSh := strings.CutPrefix(block, "sh\n"); isSh {
			for _, line := range strings.Split(body, "\n") {
				line, _, _ = strings.Cut(line, "#")
				if words, err := spawner.SplitCommand(line); err == nil && len(words) > 0 && words[0] == "bin/bub" {
					steps = append(steps, readmeStep{args: words[1:]})
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

// readmeVarying matches what differs from run to run in the README's
// sample output: generated clientIds, message ids, times, and the
// padding of table columns around them.
var readmeVarying = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`cli-[0-9a-f]{8}`), "cli-ID"},
	{regexp.MustCompile(`\b[0-9a-f]{12}-[0-9]+\b`), "MESSAGE-ID"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "TIME"},
	{regexp.MustCompile(`[ \t]+`), " "},
}

func readmeNormal(s string) string {
	for _, v := range readmeVarying {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return strings.TrimSpace(s)
}

// sameAsReadme fails the test when got differs from the README's want
// beyond what varies from run to run.
func sameAsReadme(t *testing.T, step readmeStep, got string) {
	t.Helper()
	if readmeNormal(got) != readmeNormal(step.want) {
		t.Errorf("bub %s printed\n%s\nthe README shows\n%s", strings.Join(step.args, " "), got, step.want)
	}
}

// TestDeadLetterReadme runs the README's "Retries and the dead-letter
// queue" walkthrough as written, with the real binary, and compares what
// each command prints with what the README shows.
func TestDeadLetterReadme(t *testing.T) {
	t.Parallel()
	steps := readmeSteps(t, "## Retries and the dead-letter queue")
	var sequence []string
	for _, s := range steps {
		sequence = append(sequence, s.args[0]+" "+s.args[1])
	}
	if strings.Join(sequence, ", ") != "listen --topic, send-message --topic, dlq list, dlq show, dlq replay, dlq purge" {
		t.Fatalf("README walkthrough changed; teach this test its new steps: %q", sequence)
	}
	d := startBus(t, t.TempDir())
	env := []string{"BUB_BUS_URL=" + d.url}

	// The listener that asks for retries; its subscribed line is the
	// README's.
	retrier := startBub(t, env, steps[0].args...)
	require.Eventually(t, func() bool { return strings.Contains(retrier.stderr.String(), "\n") }, 20*time.Second, 20*time.Millisecond, "the listener's subscribed line")
	sameAsReadme(t, steps[0], retrier.stderr.String())

	out, errOut, code := bub(t, env, "", steps[1].args...)
	if code != 0 {
		t.Fatalf("send-message: exit %d: %s", code, errOut)
	}
	sameAsReadme(t, steps[1], out+errOut)

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
	sameAsReadme(t, steps[2], out)

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
	sameAsReadme(t, steps[4], out)
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
	sameAsReadme(t, steps[5], out)
}
