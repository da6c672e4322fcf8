//go:build linux

package outbound

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitFor is how long a test waits for something that happens at once
// on an idle machine.
const waitFor = 10 * time.Second

// parkEcho is a server connection that echoes every data message, whose
// reading goroutine parks between messages, as the bus's does.
type parkEcho struct {
	ws  *websocket.Conn
	out *Conn
	// resume is run as a func value made once.
	resume func()
	ended  chan<- error
}

func (e *parkEcho) run() {
	for {
		if e.out.Park(e.resume) {
			return
		}
		typ, r, err := e.ws.Reader(context.Background())
		if err == nil {
			var b []byte
			if b, err = io.ReadAll(r); err == nil {
				err = e.out.WriteMessage(typ, b)
			}
		}
		if err != nil {
			_ = e.ws.CloseNow()
			e.ended <- err
			return
		}
	}
}

// parkServer is a parking echo server; conns receives each connection as
// it is accepted, and ended the error each one's reading ended with.
type parkServer struct {
	url   string
	conns chan *parkEcho
	ended chan error
}

func startParkServer(t *testing.T, opts *websocket.AcceptOptions, timeout time.Duration) *parkServer {
	t.Helper()
	s := &parkServer{conns: make(chan *parkEcho, 1000), ended: make(chan error, 1000)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, out, err := Accept(w, r, opts, timeout)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		ws.SetReadLimit(1 << 20)
		require.True(t, out.AllowPark())
		e := &parkEcho{ws: ws, out: out, ended: s.ended}
		e.resume = e.run
		s.conns <- e
		// The handler returns, as the bus's does: the connection is
		// read by the goroutines Park starts.
		go e.run()
	}))
	t.Cleanup(srv.Close)
	s.url = "ws" + strings.TrimPrefix(srv.URL, "http")
	return s
}

// parkedNow waits until n Conns of the process are parked.
func parkedNow(t *testing.T, n int) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return Parked() == n }, waitFor, time.Millisecond, "want %d parked, have %d", n, Parked()) {
		// Where the goroutines that did not park are.
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
	}
}

func dialWS(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	require.NoError(t, err)
	ws.SetReadLimit(1 << 20)
	return ws
}

func echo(t *testing.T, ws *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(msg)))
	_, got, err := ws.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, msg, string(got))
}

// Idle connections park, with no goroutine reading them, and each one
// reads on when its peer sends: many at once, round after round, so that
// a wake-up lost between a request and the arming would show; and
// messages that follow each other closely, which mostly come while the
// Conn lingers before parking (parkLinger), are all read.
func TestParkedConnsResumeOnMessage(t *testing.T) {
	const conns, rounds, burst = 100, 5, 20
	s := startParkServer(t, nil, 5*time.Second)
	clients := make([]*websocket.Conn, conns)
	for i := range clients {
		clients[i] = dialWS(t, s.url)
	}
	for round := range rounds {
		parkedNow(t, conns)
		var wg sync.WaitGroup
		for i, ws := range clients {
			wg.Go(func() { echo(t, ws, fmt.Sprintf("%d:%d", i, round)) })
		}
		wg.Wait()
	}
	var wg sync.WaitGroup
	for i, ws := range clients {
		wg.Go(func() {
			for j := range burst {
				echo(t, ws, fmt.Sprintf("%d:burst %d", i, j))
			}
		})
	}
	wg.Wait()
	for _, ws := range clients {
		require.NoError(t, ws.Close(websocket.StatusNormalClosure, ""))
	}
	for range conns {
		require.Error(t, <-s.ended)
	}
	parkedNow(t, 0)
}

// The keepalive's pong wakes a parked connection only for as long as Park
// takes to see it: the Conn parks again, with the ping answered (and the
// Accept option's hook called), and a ping of the peer's is answered too.
func TestParkAnswersControlFrames(t *testing.T) {
	pongs := make(chan string, 1)
	opts := &websocket.AcceptOptions{OnPongReceived: func(_ context.Context, p []byte) { pongs <- string(p) }}
	s := startParkServer(t, opts, 5*time.Second)
	ws := dialWS(t, s.url)
	e := <-s.conns
	// The client answers pings while it reads.
	msgs := make(chan string, 1)
	go func() {
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(b)
		}
	}()
	parkedNow(t, 1)
	require.True(t, e.out.Ping())
	require.Equal(t, "", <-pongs)
	require.Eventually(t, func() bool { return !e.out.awaitingPong.Load() }, waitFor, time.Millisecond)
	parkedNow(t, 1)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, ws.Ping(ctx), "the parked server answers the client's ping")
	parkedNow(t, 1)

	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte("after")))
	require.Equal(t, "after", <-msgs)
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, ""))
	<-s.ended
	parkedNow(t, 0)
}

// openFiles counts the process's open file descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(fds)
}

// A parked connection ends however it ends, and leaves nothing behind:
// no parked Conn, no goroutine (leakcheck), no descriptor.
func TestParkedConnEnds(t *testing.T) {
	cases := []struct {
		name string
		// end ends the connection, whose client is ws; the server's
		// reading must then end, and the client's with want.
		end  func(t *testing.T, ws *websocket.Conn, e *parkEcho)
		want websocket.StatusCode
	}{
		{"peer hangs up", func(_ *testing.T, ws *websocket.Conn, _ *parkEcho) { _ = ws.CloseNow() }, -1},
		{"peer closes", func(t *testing.T, ws *websocket.Conn, _ *parkEcho) {
			require.NoError(t, ws.Close(websocket.StatusNormalClosure, "bye"))
		}, -1},
		{"Conn closed", func(_ *testing.T, _ *websocket.Conn, e *parkEcho) { _ = e.out.Close() }, -1},
		{"write failed", func(_ *testing.T, _ *websocket.Conn, e *parkEcho) { e.out.fail(errors.New("test")) }, -1},
		{"close handshake", func(t *testing.T, _ *websocket.Conn, e *parkEcho) {
			// From another goroutine while parked, as the bus's close and
			// Shutdown do: coder/websocket reads the peer's close frame
			// itself.
			go func() { _ = e.ws.Close(websocket.StatusGoingAway, "shutting down") }()
		}, websocket.StatusGoingAway},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startParkServer(t, nil, 5*time.Second)
			getPoller() // its descriptor stays open for good
			files := openFiles(t)
			ws := dialWS(t, s.url)
			e := <-s.conns
			echo(t, ws, "hello")
			parkedNow(t, 1)
			clientErr := make(chan error, 1)
			go func() {
				_, _, err := ws.Read(context.Background())
				clientErr <- err
			}()
			tc.end(t, ws, e)
			select {
			case err := <-s.ended:
				require.Error(t, err)
			case <-time.After(waitFor):
				t.Fatal("the server's reading did not end")
			}
			err := <-clientErr
			require.Error(t, err)
			if tc.want >= 0 {
				require.Equal(t, tc.want, websocket.CloseStatus(err), "client: %v", err)
			}
			_ = ws.CloseNow()
			parkedNow(t, 0)
			require.Eventually(t, func() bool { return openFiles(t) <= files }, waitFor, time.Millisecond, "descriptors left open")
		})
	}
}

// rawClient is a WebSocket client that writes frames as the test makes
// them, so that it can split them, pipeline them and interleave control
// frames anywhere.
type rawClient struct {
	net.Conn
	br *bufio.Reader
}

// dialRaw upgrades a TCP connection to url, writing early right after the
// upgrade request, in the same write call.
func dialRaw(t *testing.T, url string, early []byte) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(url, "ws://"))
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	req := "GET / HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	_, err = nc.Write(append([]byte(req), early...))
	require.NoError(t, err)
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	return &rawClient{Conn: nc, br: br}
}

func (c *rawClient) expect(t *testing.T, op byte, payload string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitFor)))
	gotOp, got := readFrame(t, c.br)
	require.Equal(t, op, gotOp, "opcode")
	require.Equal(t, payload, got)
}

// What a parked Conn hands coder/websocket stops at frame ends, so
// whatever way the peer's frames come (pipelined with the upgrade
// request, many in one write with pings and pongs among them,
// fragmented with a ping between the fragments, larger than a batch,
// byte by byte), every message arrives whole and in order, and the Conn
// parks between messages.
func TestParkFramesAnyHowSent(t *testing.T) {
	s := startParkServer(t, nil, 5*time.Second)
	big := strings.Repeat("b", 3*readAheadSize+17)
	c := dialRaw(t, s.url, append(clientFrame(opText, true, "early 1"), clientFrame(opText, true, "early 2")...))
	c.expect(t, opText, "early 1")
	c.expect(t, opText, "early 2")
	parkedNow(t, 1)

	var batch []byte
	batch = append(batch, clientFrame(opPong, true, "")...)
	batch = append(batch, clientFrame(opText, true, "one")...)
	batch = append(batch, clientFrame(opPing, true, "p1")...)
	batch = append(batch, clientFrame(opPong, true, "x")...)
	batch = append(batch, clientFrame(opText, false, "fr")...)
	batch = append(batch, clientFrame(opPing, true, "p2")...)
	batch = append(batch, clientFrame(opContinuation, false, "ag")...)
	batch = append(batch, clientFrame(opContinuation, true, "ments")...)
	batch = append(batch, clientFrame(opText, true, big)...)
	batch = append(batch, clientFrame(opText, true, "")...)
	batch = append(batch, clientFrame(opText, true, "last")...)
	batch = append(batch, clientFrame(opPing, true, "p3")...)
	_, err := c.Write(batch)
	require.NoError(t, err)
	c.expect(t, opText, "one")
	c.expect(t, opPong, "p1")
	c.expect(t, opPong, "p2")
	c.expect(t, opText, "fragments")
	c.expect(t, opText, big)
	c.expect(t, opText, "")
	c.expect(t, opText, "last")
	c.expect(t, opPong, "p3")
	parkedNow(t, 1)

	for i, msg := range []string{"slow", strings.Repeat("m", 300)} {
		f := clientFrame(opText, true, msg)
		for j := range f {
			_, err := c.Write(f[j : j+1])
			require.NoError(t, err, "frame %d byte %d", i, j)
		}
		c.expect(t, opText, msg)
		parkedNow(t, 1)
	}
	require.NoError(t, c.Close())
	require.Error(t, <-s.ended)
	parkedNow(t, 0)
}

// Only a server's Conn allowed to park parks and cuts its hand-outs at
// frame ends; any other reads as before.
func TestOnlyAllowedConnsPark(t *testing.T) {
	c, _ := tcpPair(t)
	require.False(t, c.parks)
	require.False(t, c.reader.bounded)
	require.False(t, c.Park(func() { t.Error("resumed") }))
	client := newClientConn(c.Conn, time.Second)
	require.False(t, client.AllowPark(), "a client's Conn")
	require.False(t, client.reader.bounded)
}
