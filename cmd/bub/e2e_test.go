package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/internal/testport"
)

// bubBinary is the bub binary built once for the tests that run it as a
// user would, as a separate process.
var bubBinary string

func TestMain(m *testing.M) {
	flag.Parse()
	if runsNoBub() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "bub-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bubBinary = filepath.Join(dir, "bub")
	// Every race-built process sleeps atexit_sleep_ms (1 s by default)
	// after main returns, for races of goroutines that outlive main. The
	// tests run about a hundred bub processes, so that sleep was most of
	// this package's time; a race while a command runs is still reported
	// (exit status 66, "DATA RACE" on stderr).
	if !strings.Contains(os.Getenv("GORACE"), "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	build := exec.Command("go", "build", "-race", "-o", bubBinary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build bub:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	exampleDirs.Lock()
	for _, d := range exampleDirs.paths {
		os.RemoveAll(d)
	}
	exampleDirs.Unlock()
	os.Exit(code)
}

// runsNoBub reports whether this run starts no bub process, so needs no
// build: a fuzz worker runs only the fuzz function, and workers restart
// during a run (a race build in each restart stalled fuzzing for tens of
// seconds at a time); make fuzz's coordinator runs no test beside the
// target (-run '^$'); and -list runs nothing.
func runsNoBub() bool {
	value := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	return value("test.fuzzworker") == "true" || value("test.list") != "" ||
		value("test.fuzz") != "" && value("test.run") == "^$"
}

// daemon is a bub serve process.
type daemon struct {
	cmd    *exec.Cmd
	url    string
	http   string
	stderr *lockedBuffer
}

// freeAddr returns a loopback address claimed for this test, for a bub
// process to listen on (testport.Addr): claimed across the test binaries
// that run at once, whose cluster tests take their ports the same way.
func freeAddr(t *testing.T) string {
	t.Helper()
	return testport.Addr(t)
}

// startBus runs bub serve on a free loopback port with its store in
// dataDir and waits until /readyz answers.
func startBus(t *testing.T, dataDir string, flags ...string) *daemon {
	t.Helper()
	return startBusAt(t, freeAddr(t), dataDir, flags...)
}

// startBusAt is startBus on addr, as a restart on the address the peers
// know.
func startBusAt(t *testing.T, addr, dataDir string, flags ...string) *daemon {
	t.Helper()
	d := spawnBusAt(t, addr, dataDir, flags...)
	checkfor.Check(t, 20*time.Second, func() error {
		resp, err := http.Get(d.http + "/readyz")
		if err != nil {
			return fmt.Errorf("bub serve did not become ready: %w\n%s", err, d.stderr)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("bub serve did not become ready: /readyz %s\n%s", resp.Status, d.stderr)
		}
		return nil
	})
	return d
}

// spawnBusAt is startBusAt without the wait for /readyz: for the nodes
// of a cluster, of which none is ready before a majority runs.
func spawnBusAt(t *testing.T, addr, dataDir string, flags ...string) *daemon {
	t.Helper()
	args := append([]string{"serve", "--listen", addr, "--data-dir", dataDir}, flags...)
	d := &daemon{cmd: exec.Command(bubBinary, args...), url: "ws://" + addr + "/", http: "http://" + addr, stderr: &lockedBuffer{}}
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.kill()
		if strings.Contains(d.stderr.String(), "DATA RACE") {
			t.Errorf("the race detector fired in bub serve:\n%s", d.stderr)
		}
	})
	return d
}

func (d *daemon) kill() {
	if d.cmd.ProcessState == nil {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("bub serve exited with %v: %s", err, d.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("bub serve did not stop on SIGTERM: %s", d.stderr)
	}
}

// bub runs one bub command to completion.
func bub(t *testing.T, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bubBinary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code = 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// startListenProcess runs the bub binary's listen --topic pattern with env in the
// background; it returns the process, its stdout lines and its stderr.
func startListenProcess(t *testing.T, env []string, pattern string) (*exec.Cmd, <-chan string, *lockedBuffer) {
	t.Helper()
	listen := exec.Command(bubBinary, "listen", "--topic", pattern)
	listen.Env = append(os.Environ(), env...)
	stdout, err := listen.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	listenErr := &lockedBuffer{}
	listen.Stderr = listenErr
	if err := listen.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listen.Process.Kill(); _ = listen.Wait() })
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return listen, lines, listenErr
}

// TestCLIEndToEnd is the walkthrough of docs/guide/01-first-message.md (and the README's hello): serve, listen, send-message.
func TestCLIEndToEnd(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir())
	env := []string{"BUB_BUS_URL=" + d.url}

	listen, lines, listenErr := startListenProcess(t, env, "inbound:*")

	// listen has subscribed once a message to its topic is routed.
	var out string
	checkfor.Check(t, 20*time.Second, func() error {
		var errOut string
		var code int
		out, errOut, code = bub(t, env, "", "send-message", "--topic", "inbound:chat-1", "--payload", `{"type":"plaintext_message","text":"hello"}`)
		if code != 0 {
			return fmt.Errorf("send-message never routed: exit %d: %s; listen stderr: %s", code, errOut, listenErr)
		}
		return nil
	})
	var result struct {
		Success   bool   `json:"success"`
		MessageID string `json:"messageId"`
		Acks      []struct {
			ClientID  string `json:"client_id"`
			Processed bool   `json:"processed"`
		} `json:"acks"`
	}
	if err := json.Unmarshal([]byte(out), &result); err != nil {
		t.Fatalf("send-message printed %q: %v", out, err)
	}
	if !result.Success || len(result.Acks) != 1 || !result.Acks[0].Processed {
		t.Fatalf("result %+v", result)
	}
	var delivery struct {
		Topic     string          `json:"topic"`
		MessageID string          `json:"messageId"`
		Payload   json.RawMessage `json:"payload"`
	}
	select {
	case line := <-lines:
		if err := json.Unmarshal([]byte(line), &delivery); err != nil {
			t.Fatalf("listen printed %q: %v", line, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("listen printed nothing")
	}
	if delivery.Topic != "inbound:chat-1" || delivery.MessageID != result.MessageID || !strings.Contains(string(delivery.Payload), `"hello"`) {
		t.Errorf("delivery %+v for result %+v", delivery, result)
	}

	// Payload from stdin and from a file.
	file := filepath.Join(t.TempDir(), "task.json")
	if err := os.WriteFile(file, []byte(`{"type":"task_request","task_id":"t-1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, payload := range []string{"-", "@" + file} {
		if _, errOut, code := bub(t, env, `{"type":"plaintext_message"}`, "send-message", "--topic", "inbound:x", "--payload", payload); code != 0 {
			t.Errorf("--payload %s: exit %d: %s", payload, code, errOut)
		}
	}

	listen.Process.Signal(syscall.SIGINT)
	if err := listen.Wait(); err != nil {
		t.Errorf("listen on SIGINT: %v: %s", err, listenErr)
	}
	d.stop(t)
	if !strings.Contains(d.stderr.String(), "bus stopped") {
		t.Errorf("serve log lacks a clean stop: %s", d.stderr)
	}
}

func TestCLIErrors(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir())
	env := []string{"BUB_BUS_URL=" + d.url}
	tests := []struct {
		name    string
		env     []string
		args    []string
		inError string
	}{
		{"no subscriber", env, []string{"send-message", "--topic", "nobody:1", "--payload", `{"type":"t"}`}, "no subscriber"},
		{"bad JSON", env, []string{"send-message", "--topic", "a", "--payload", `{"type":`}, "JSON"},
		{"no type", env, []string{"send-message", "--topic", "a", "--payload", `{"text":"hi"}`}, "type"},
		{"bus unreachable", []string{"BUB_BUS_URL=ws://" + freeAddr(t) + "/"}, []string{"send-message", "--topic", "a", "--payload", `{"type":"t"}`}, "dial"},
	}
	t.Run("held is accepted", func(t *testing.T) {
		out, errOut, code := bub(t, env, "", "send-message", "--topic", "agent:absent", "--payload", `{"type":"t"}`)
		if code != 0 || !strings.Contains(out, `"held":true`) || !strings.Contains(errOut, "held") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := bub(t, tt.env, "", tt.args...)
			if code == 0 {
				t.Fatal("exit status 0")
			}
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "bub") || !strings.Contains(last, tt.inError) {
				t.Errorf("stderr %q: want a one-line error mentioning %q", errOut, tt.inError)
			}
		})
	}
	// A second daemon on the same data directory stops at start with one
	// line naming the path.
	_, errOut, code := bub(t, nil, "", "serve", "--listen", freeAddr(t), "--data-dir", d.cmd.Args[5])
	if code == 0 || !strings.Contains(errOut, filepath.Join(d.cmd.Args[5], "bub.db")) || !strings.Contains(errOut, "locked") {
		t.Errorf("second serve on a locked store: exit %d, stderr %q", code, errOut)
	}
}
