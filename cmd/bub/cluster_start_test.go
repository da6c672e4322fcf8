package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// httpStatus GETs url and returns the status code and body, or 0 when
// nothing answers.
func httpStatus(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// TestClusterStartServesHealthAndStopsOnSignal: a node whose peers are
// not up waits for them, and meanwhile answers /healthz (alive), says
// on /readyz that it is starting, logs which routes it cannot reach,
// and stops at once on SIGTERM (it used to ignore it for about a
// minute, and to serve nothing).
func TestClusterStartServesHealthAndStopsOnSignal(t *testing.T) {
	listen, natsListen, peer1, peer2 := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	d := &daemon{http: "http://" + listen, stderr: &lockedBuffer{}}
	d.cmd = exec.Command(bubBinary, "serve", "--listen", listen, "--data-dir", t.TempDir(),
		"--cluster-name", "t", "--node-id", "a", "--nats-listen", natsListen,
		"--nats-routes", "nats://"+peer1+",nats://"+peer2)
	d.cmd.Stderr = d.stderr
	require.NoError(t, d.cmd.Start())
	t.Cleanup(d.kill)

	require.Eventually(t, func() bool {
		code, _ := httpStatus(d.http + "/healthz")
		return code == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond, "/healthz answers while the node starts")
	code, body := httpStatus(d.http + "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "starting", body)
	require.Eventually(t, func() bool {
		log := d.stderr.String()
		return strings.Contains(log, "route to nats://"+peer1+" unreachable") && strings.Contains(log, "route to nats://"+peer2+" unreachable")
	}, 20*time.Second, 20*time.Millisecond, "the log names both unreachable routes")

	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	signalled := time.Now()
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		t.Logf("stopped %v after SIGTERM", time.Since(signalled))
		assert.NoError(t, err, "exit status: %s", d.stderr)
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10 s after SIGTERM:\n%s", d.stderr)
	}
	assert.Contains(t, d.stderr.String(), "stopped while starting")
	assert.NotContains(t, d.stderr.String(), "DATA RACE")
}

// TestClusterRoutePortInUse: a node whose --nats-listen port is taken
// fails at once, naming the address, instead of waiting a minute for
// routes that cannot come.
func TestClusterRoutePortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", freeAddr(t))
	require.NoError(t, err)
	defer taken.Close()
	stderr, code, took := runBounded(t, "serve", "--listen", freeAddr(t), "--data-dir", t.TempDir(),
		"--cluster-name", "t", "--node-id", "a", "--nats-listen", taken.Addr().String(),
		"--nats-routes", "nats://"+freeAddr(t))
	assert.Equal(t, 1, code)
	assert.Less(t, took, 10*time.Second, "it waited instead of failing")
	last := lastLine(stderr)
	assert.Contains(t, last, "cluster listen address "+taken.Addr().String())
	assert.Contains(t, last, "address already in use")
}

// TestClusterDataDirLocked: a second node started on a running node's
// --data-dir is refused, as a second single node is, before its NATS
// server touches the directory; the first node stays ready.
func TestClusterDataDirLocked(t *testing.T) {
	dataDir := t.TempDir()
	first := startBus(t, dataDir, "--cluster-name", "t", "--node-id", "a", "--nats-listen", freeAddr(t))
	stderr, code, took := runBounded(t, "serve", "--listen", freeAddr(t), "--data-dir", dataDir,
		"--cluster-name", "t", "--node-id", "b", "--nats-listen", freeAddr(t))
	assert.Equal(t, 1, code)
	assert.Less(t, took, 10*time.Second)
	assert.Contains(t, lastLine(stderr), "locked by another process")
	assert.Contains(t, lastLine(stderr), dataDir)
	assert.NotContains(t, stderr, "nats-server", "the second node's NATS server ran")
	code, _ = httpStatus(first.http + "/readyz")
	assert.Equal(t, http.StatusOK, code, "the first node after the refused start: %s", first.stderr)
	first.stop(t)
	assert.NotContains(t, first.stderr.String(), "level=ERROR")
}

// runBounded runs bub with args and returns its stderr, exit code and
// run time; a process still running after 30 s is killed (code -1).
func runBounded(t *testing.T, args ...string) (stderr string, code int, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var errOut strings.Builder
	cmd := exec.CommandContext(ctx, bubBinary, args...)
	cmd.Stderr = &errOut
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	t.Logf("bub %s exited after %v: %v", args[0], took, err)
	return errOut.String(), cmd.ProcessState.ExitCode(), took
}

// lastLine is the last line of s.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}
