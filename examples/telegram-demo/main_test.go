package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo runs make telegram-demo's program against bub and the echo
// agent built from this checkout: the chat's lines come back echoed, and
// the journal it prints shows each turn as bus messages, tg:42 in from
// the bridge and outbound:42 back from a spawned agent.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	bins := map[string]string{"bub": "../../cmd/bub", "echo-agent": "../echo-agent"}
	for name, pkg := range bins {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	var out bytes.Buffer
	if err := demo(t.Context(), &out, filepath.Join(dir, "bub"), filepath.Join(dir, "echo-agent")); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"chat 42 ▸ user42 writes: hello",
		"tg:42 from telegram",
		"woken           to agent-",
		"outbound:42 from agent-",
		"chat 42 ◂ @bub_test_bot answers: echo: hello",
		"chat 42 ◂ @bub_test_bot answers: echo: is anybody there?",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo did not print %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "system:") {
		t.Errorf("the bus's own events were printed:\n%s", out.String())
	}
}
