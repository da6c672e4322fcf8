package cluster

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// logLines are the lines written to out.
func logLines(out *bytes.Buffer) []string {
	return strings.Split(strings.TrimSpace(out.String()), "\n")
}

// refused is the error nats-server logs when a route's port is closed.
func refused(addr string) error {
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		panic(err)
	}
	return &net.OpError{Op: "dial", Net: "tcp", Addr: tcp, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// TestRouteLogSummarizes: nats-server's line per failed route attempt
// (four a second for a node that is down) becomes one line when the
// route is lost and one every routeSummaryEvery saying for how long;
// a route back for longer than routeOutageGap and lost again is a new
// outage, reported at once.
func TestRouteLogSummarizes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		routes := []*url.URL{{Scheme: "nats", Host: "127.0.0.1:6223"}, {Scheme: "nats", Host: "c:6222"}}
		l := newServerLog(slog.New(slog.NewTextHandler(&out, nil)), routes)
		start := time.Now()
		// 42 s of a node down: four attempts a second.
		for i := range 42 * 4 {
			l.Errorf(routeConnectError, i+1, refused("127.0.0.1:6223"))
			time.Sleep(250 * time.Millisecond) // the bubble's fake time between attempts
		}
		got := logLines(&out)
		want := []string{
			"route to nats://127.0.0.1:6223 unreachable; NATS keeps trying",
			"route to nats://127.0.0.1:6223 unreachable for 30s",
		}
		if len(got) != len(want) {
			t.Fatalf("%d lines for 42 s of failures, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
		}
		for i, w := range want {
			if !strings.Contains(got[i], w) || !strings.Contains(got[i], "connection refused") || !strings.Contains(got[i], "level=WARN") {
				t.Errorf("line %d: %s\nwant %q, the error, at WARN", i, got[i], w)
			}
		}
		if !strings.Contains(got[1], "attempts=121") {
			t.Errorf("summary %q does not count the 121 attempts made by then", got[1])
		}
		if u := l.routes.unreachable(); len(u) != 1 || u[0] != "nats://127.0.0.1:6223" {
			t.Errorf("unreachable: %v", u)
		}
		if time.Since(start) != 42*time.Second {
			t.Fatalf("the bubble's clock moved %v", time.Since(start))
		}

		// Back for longer than the gap: nothing unreachable; lost again:
		// a new outage, said at once, counted from its start.
		time.Sleep(routeOutageGap + time.Second) // the bubble's fake time
		if u := l.routes.unreachable(); len(u) != 0 {
			t.Errorf("unreachable after %v without a failure: %v", routeOutageGap+time.Second, u)
		}
		l.Errorf(routeConnectError, 1, refused("127.0.0.1:6223"))
		// A lost name resolves to nothing: named by its route too.
		l.Errorf(routeConnectError, 1, fmt.Errorf("lookup c on 127.0.0.11:53: no such host"))
		got = logLines(&out)[2:]
		if len(got) != 2 || !strings.Contains(got[0], "route to nats://127.0.0.1:6223 unreachable; NATS keeps trying") ||
			!strings.Contains(got[1], "route to nats://c:6222 unreachable; NATS keeps trying") {
			t.Errorf("after the route came back and went again:\n%s", strings.Join(got, "\n"))
		}
	})
}

// TestDialTarget reads the route an error is about from nats-server's
// connection errors.
func TestDialTarget(t *testing.T) {
	for _, c := range []struct{ err, want string }{
		{"dial tcp 127.0.0.1:6223: connect: connection refused", "127.0.0.1:6223"},
		{"dial tcp [::1]:6223: connect: connection refused", "[::1]:6223"},
		{"dial tcp 10.0.0.3:6222: i/o timeout", "10.0.0.3:6222"},
		{"lookup b2 on 127.0.0.11:53: no such host", "b2"},
		{"dial tcp: lookup b2: no such host", "b2"},
		{"something else", "a route"},
	} {
		if got := dialTarget(c.err); got != c.want {
			t.Errorf("dialTarget(%q) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestServerLogPassesOtherErrors: errors other than a route's failed
// attempts are logged as they come.
func TestServerLogPassesOtherErrors(t *testing.T) {
	var out bytes.Buffer
	l := newServerLog(slog.New(slog.NewTextHandler(&out, nil)), nil)
	l.Errorf("JetStream %s", "trouble")
	l.Errorf("JetStream %s", "trouble")
	if got := logLines(&out); len(got) != 2 || !strings.Contains(got[0], "JetStream trouble") || !strings.Contains(got[0], "level=ERROR") {
		t.Errorf("got %q", got)
	}
}
