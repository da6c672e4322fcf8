package bus_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/protocol"
)

// fanOutSubscribersEnv, when set in a test binary's environment, is the
// bus URL TestFanOutSubscribersProcess connects its subscribers to;
// fanOutCountEnv is how many.
const (
	fanOutSubscribersEnv = "BUB_BENCH_FANOUT_URL"
	fanOutCountEnv       = "BUB_BENCH_FANOUT_N"
)

// BenchmarkFanOutProcess publishes 1 KiB to n subscribers of one topic
// under continueAll, one message in flight, each subscriber answering
// processed at once, as the harness's fan-out does. The subscribers run in
// a process of their own (this test binary again, running
// TestFanOutSubscribersProcess) and the publisher reads its result
// without decoding it, so that what the benchmark reports is the bus's
// own: allocs/op and B/op per fan-out, and cpu-µs/delivery, this
// process's CPU time (user and system, nearly all of it the bus's) per
// delivery. BenchmarkFanOut, whose clients share the process, says
// nothing of the bus's allocations.
func BenchmarkFanOutProcess(b *testing.B) {
	for _, n := range []int{100, 1000} {
		for _, journaled := range []bool{true, false} {
			name := fmt.Sprintf("subscribers=%d/journal=%v", n, journaled)
			b.Run(name, func(b *testing.B) { fanOutProcess(b, n, journaled) })
		}
	}
}

func fanOutProcess(b *testing.B, n int, journaled bool) {
	var extensions []bus.Extension
	if journaled {
		extensions = []bus.Extension{journal.New(nil)}
	}
	srv := bustest.Start(b, &bus.Options{Extensions: extensions, Limits: bus.Limits{MaxSubscriptions: -1, MaxConnectionsPerAddr: -1, MaxPatternWildcards: -1}})
	if n > 1<<(len(fanOutTopic)-len("bench:")) {
		b.Fatalf("%d subscribers need more patterns than %s has", n, fanOutTopic)
	}
	startSubscribers(b, srv.URL, n)
	pub, err := bustest.DialWS(srv.URL, "")
	if err != nil {
		b.Fatal(err)
	}
	defer pub.CloseNow()
	pub.SetReadLimit(-1)
	buf := make([]byte, 0, 256<<10)
	call := func(frame []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
		defer cancel()
		if err := pub.Write(ctx, websocket.MessageText, frame); err != nil {
			b.Fatal(err)
		}
		buf, err = readFrame(ctx, pub, buf[:0])
		if err != nil {
			b.Fatal(err)
		}
		if !bytes.Contains(buf[:min(len(buf), 64)], []byte(`"result"`)) {
			b.Fatalf("answer: %.200s", buf)
		}
	}
	call([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientId":"pub"}}`))
	send := []byte(`{"jsonrpc":"2.0","id":1,"method":"sendMessage","params":{"topic":"` + fanOutTopic + `","payload":{"type":"bench","text":"` + strings.Repeat("x", 1024) + `"}}}`)
	call(send)
	if acks := bytes.Count(buf, []byte(`"client_id"`)); acks != n {
		b.Fatalf("%d acks, want %d: %.300s", acks, n, buf)
	}
	b.ReportAllocs()
	b.ResetTimer()
	before := cpuTime()
	for b.Loop() {
		call(send)
	}
	b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N*n), "cpu-µs/delivery")
}

// readFrame appends the next message read from ws to buf, reusing it: the
// publisher's read of a result allocates nothing of its size.
func readFrame(ctx context.Context, ws *websocket.Conn, buf []byte) ([]byte, error) {
	_, r, err := ws.Reader(ctx)
	if err != nil {
		return buf, err
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// fanOutTopic is the topic BenchmarkFanOutProcess publishes on. Under
// last-match-wins routing only the newest of identical patterns counts, so
// subscriber i's pattern (fanOutPattern) is the topic with '?' for its
// letters at the set bits of i, as the harness's fan-out does.
const fanOutTopic = "bench:abcdefghijkl"

func fanOutPattern(i int) string {
	p := []byte(fanOutTopic)
	tail := p[len("bench:"):]
	for j := range tail {
		if i&(1<<j) != 0 {
			tail[j] = '?'
		}
	}
	return string(p)
}

// cpuTime is this process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startSubscribers runs n subscribers of "bench" connected to url in a
// process of their own, and returns once every one is subscribed; the
// process ends with the benchmark.
func startSubscribers(b *testing.B, url string, n int) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFanOutSubscribersProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fanOutSubscribersEnv+"="+url, fanOutCountEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// Closing its stdin ends the process.
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if line != "ready\n" {
		rest, _ := io.ReadAll(r)
		b.Fatalf("subscribers: %s%s, %v", line, rest, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
}

// TestFanOutSubscribersProcess is BenchmarkFanOutProcess's subscribers,
// when this test binary is started by it; otherwise it does nothing. It
// writes "ready" once they are subscribed and ends when its stdin closes.
func TestFanOutSubscribersProcess(t *testing.T) {
	url := os.Getenv(fanOutSubscribersEnv)
	if url == "" {
		t.Skip("run by BenchmarkFanOutProcess")
	}
	n, err := strconv.Atoi(os.Getenv(fanOutCountEnv))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		bustest.Connect(t, url, fmt.Sprint("sub-", i), bustest.Processed).Subscribe(fanOutPattern(i), protocol.PolicyContinueAll)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
