package peer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bub-bus/bub/peer"
)

// BenchmarkRelay measures a Go-SDK-to-Go-SDK relay: a publisher and a
// subscriber, both peer.Conn, over a real bus on loopback, all in this
// process (so allocs/op counts the bus's share too). One op is one
// SendMessage answered with the subscriber's ack; "serial" keeps one
// message in flight, "depth64" 64 (32 goroutines per GOMAXPROCS on the
// 2-core box it was written on).
func BenchmarkRelay(b *testing.B) {
	benchmarkRelay(b, func(b *testing.B) string { return startBus(b, nil).URL })
}

// BenchmarkRelaySDK is BenchmarkRelay with the bus in a process of its
// own (bub serve, built for the run), so that what this process spends is
// the SDK's alone, publisher and subscriber together: allocs/op and B/op,
// and sdk-µs/op, the CPU time of this process per relay.
func BenchmarkRelaySDK(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "bub")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bub").CombinedOutput(); err != nil {
		b.Fatalf("build bub: %v\n%s", err, out)
	}
	benchmarkRelay(b, func(b *testing.B) string { return startBubServe(b, bin) })
}

// benchmarkRelay runs the relays of BenchmarkRelay on the bus that
// startBus starts for each run.
func benchmarkRelay(b *testing.B, startBus func(*testing.B) string) {
	payload := json.RawMessage(`{"type":"plaintext_message","text":"` + strings.Repeat("x", 1000) + `"}`)
	setup := func(b *testing.B) *peer.Conn {
		url := startBus(b)
		// Room for every message in flight: at exactly 64, a handler
		// that has answered but not yet let go of its slot turns the
		// next delivery away as busy, and the bus retries it.
		sub := dial(b, url, "sub", &peer.Options{MaxConcurrentHandlers: 256})
		if err := sub.Subscribe(context.Background(), "bench", func(context.Context, *peer.Delivery) (peer.Result, error) {
			return peer.Result{Processed: true}, nil
		}, nil); err != nil {
			b.Fatal(err)
		}
		return dial(b, url, "pub", nil)
	}
	send := func(b *testing.B, pub *peer.Conn) {
		r, err := pub.SendMessage(context.Background(), "bench", payload, nil)
		if err != nil {
			b.Error(err)
		} else if !r.Success || len(r.Acks) != 1 || !r.Acks[0].Processed {
			b.Errorf("not delivered: %+v", r)
		}
	}
	b.Run("serial", func(b *testing.B) {
		pub := setup(b)
		b.ReportAllocs()
		b.SetBytes(int64(len(payload)))
		start := cpuTime()
		for b.Loop() {
			send(b, pub)
		}
		reportCPU(b, start)
	})
	b.Run("depth64", func(b *testing.B) {
		pub := setup(b)
		b.ReportAllocs()
		b.SetParallelism(32)
		b.SetBytes(int64(len(payload)))
		b.ResetTimer()
		start := cpuTime()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				send(b, pub)
			}
		})
		reportCPU(b, start)
	})
}

// cpuTime returns the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports this process's CPU time per op since start, in µs:
// the SDK's alone when the bus is a process of its own.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
}

// busListening is the line bub serve logs once it listens, and its URL.
var busListening = regexp.MustCompile(`msg="bus listening" url=(\S+)`)

// startBubServe starts bin, a bub binary, as `bub serve` on a free
// loopback port with a fresh store, stops it when b ends, and returns its
// URL.
func startBubServe(b *testing.B, bin string) string {
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", b.TempDir(), "--log-level", "info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start bub serve: %v", err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		if m := busListening.FindStringSubmatch(lines.Text()); m != nil {
			go func() { // the rest of its log, so that it never blocks
				for lines.Scan() {
				}
			}()
			return m[1]
		}
	}
	b.Fatalf("bub serve ended before it listened: %v", lines.Err())
	return ""
}
