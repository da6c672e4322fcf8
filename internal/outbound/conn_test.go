package outbound

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m, func() error {
		if n := Parked(); n > 0 {
			return fmt.Errorf("%d Conns are still parked", n)
		}
		return nil
	})
}

// pipe returns a Conn over one end of a synchronous pipe, whose writes
// return only once the other end has read them, and that other end.
func pipe(t *testing.T, timeout time.Duration) (*Conn, net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return newConn(a, timeout), b
}

// readFrame reads one unmasked frame and returns its opcode and payload.
func readFrame(t *testing.T, r io.Reader) (byte, string) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatalf("read frame header: %v", err)
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			t.Fatal(err)
		}
		n = int(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			t.Fatal(err)
		}
		n = int(binary.BigEndian.Uint64(l[:]))
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatalf("read frame payload: %v", err)
	}
	if h[0]&0x80 == 0 {
		t.Fatalf("frame %q is not final", p)
	}
	return h[0] & 0x0f, string(p)
}

// settled waits, in a synctest bubble, until every goroutine of the
// bubble waits, and returns c's state then: whether a write is under way,
// and how many frames have had to wait for their turn.
func settled(c *Conn) (writing bool, lined uint64) {
	synctest.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writing, c.lined
}

// A message written while nothing else is: one write call, made before
// WriteMessage returns (the pipe's write returns only once the peer read
// it), so a lone message waits for no timer and no other goroutine.
func TestLoneMessageWrittenInline(t *testing.T) {
	c, peer := pipe(t, time.Second)
	got := make(chan string, 1)
	go func() {
		r := bufio.NewReader(peer)
		_, p := readFrame(t, r)
		got <- p
	}()
	if err := c.WriteMessage(websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if writes, frames := c.Stats(); writes != 1 || frames != 1 {
		t.Fatalf("after WriteMessage returned: %d writes, %d frames; want 1, 1", writes, frames)
	}
	if p := <-got; p != "hello" {
		t.Fatalf("peer read %q", p)
	}
}

// Frames written while a write is under way leave together in one write
// call once it returns, whole and in order.
func TestQueuedFramesLeaveInOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, peer := pipe(t, 5*time.Second)
		first := make(chan error, 1)
		go func() { first <- c.WriteMessage(websocket.MessageBinary, []byte("first")) }()
		writing, _ := settled(c)
		require.True(t, writing, "the first write is not blocked in the pipe")
		for i := range 5 {
			if err := c.WriteMessage(websocket.MessageText, []byte(strings.Repeat("x", i*100))); err != nil {
				t.Fatal(err)
			}
		}
		r := bufio.NewReader(peer)
		if op, p := readFrame(t, r); op != 2 || p != "first" {
			t.Fatalf("first frame: op %d %q", op, p)
		}
		for i := range 5 {
			if op, p := readFrame(t, r); op != 1 || p != strings.Repeat("x", i*100) {
				t.Fatalf("frame %d: op %d, %d bytes", i, op, len(p))
			}
		}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if writes, frames := c.Stats(); writes != 2 || frames != 6 {
			t.Fatalf("%d writes for %d frames; want 2 for 6", writes, frames)
		}
	})
}

// A peer that stops reading fails the Conn at the write timeout: the
// writer under way, a writer waiting for room in the queue and every later
// one get the error, and the socket is closed. The pipe runs in memory,
// so the test runs in a synctest bubble: the clock moves only when every
// goroutine waits, and the failure comes exactly at the timeout however
// loaded the machine is.
func TestStalledPeerFailsWithinTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		c, peer := pipe(t, timeout)
		start := time.Now()
		errs := make(chan error, 3)
		go func() { errs <- c.WriteMessage(websocket.MessageBinary, []byte("never read")) }()
		writing, _ := settled(c)
		require.True(t, writing, "the first write is not under way")
		// Fill the queue, then one more writer must wait for room.
		big := make([]byte, maxQueued)
		if err := c.WriteMessage(websocket.MessageBinary, big); err != nil {
			t.Fatal(err)
		}
		go func() { errs <- c.WriteMessage(websocket.MessageBinary, big) }()
		go func() { errs <- c.WriteMessage(websocket.MessageBinary, []byte("small")) }()
		for range 3 {
			if err := <-errs; err == nil {
				t.Fatal("a write to a stalled peer succeeded")
			}
		}
		if elapsed := time.Since(start); elapsed != timeout {
			t.Errorf("the writes failed after %v, want the write timeout, %v", elapsed, timeout)
		}
		if err := c.WriteMessage(websocket.MessageText, []byte("later")); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("later write: %v, want the timeout", err)
			}
		}
		if _, err := peer.Read(make([]byte, 1)); err == nil {
			t.Fatal("the socket is still open")
		}
	})
}

// Only whole control frames may come through Write, and after a close
// frame no data frame and no ping follow.
func TestControlFramesAndClose(t *testing.T) {
	c, peer := pipe(t, time.Second)
	go io.Copy(io.Discard, peer)
	if _, err := c.Write([]byte{0x81, 2, 'h', 'i'}); !errors.Is(err, errNotControl) {
		t.Fatalf("data frame through Write: %v", err)
	}
	if _, err := c.Write([]byte{0x8a, 5, 'x'}); !errors.Is(err, errNotControl) {
		t.Fatalf("truncated pong through Write: %v", err)
	}
	if _, err := c.Write([]byte{0x8a, 1, 'x'}); err != nil {
		t.Fatalf("pong: %v", err)
	}
	if _, err := c.Write([]byte{0x88, 2, 0x03, 0xe8}); err != nil {
		t.Fatalf("close frame: %v", err)
	}
	if err := c.WriteMessage(websocket.MessageText, []byte("late")); !errors.Is(err, ErrCloseSent) {
		t.Fatalf("data after close: %v", err)
	}
	if c.Ping() {
		t.Fatal("a ping went out after the close frame")
	}
}

func TestHeader(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{
		{0, "8100"}, {125, "817d"}, {126, "817e007e"}, {65535, "817effff"},
		{65536, "817f0000000000010000"},
	} {
		if got := fmt.Sprintf("%x", header(nil, 1, tc.n)); got != tc.want {
			t.Errorf("header(%d) = %s, want %s", tc.n, got, tc.want)
		}
	}
}

// serve runs handler on a WebSocket accepted through Accept and returns a
// client connected to it.
func serve(t testing.TB, opts *websocket.AcceptOptions, handler func(ws *websocket.Conn, out *Conn)) *websocket.Conn {
	t.Helper()
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, out, err := Accept(w, r, opts, 5*time.Second)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		wg.Add(1)
		defer wg.Done()
		handler(ws, out)
	}))
	t.Cleanup(func() {
		srv.Close()
		wg.Wait()
	})
	client, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	client.SetReadLimit(-1)
	t.Cleanup(func() { client.CloseNow() })
	return client
}

// Over a real socket, writers racing on one connection: every message
// arrives whole and each writer's in its order; then the close handshake
// that coder/websocket runs through the Conn completes.
func TestConcurrentWritersOverWebSocket(t *testing.T) {
	const writers, each = 8, 200
	done := make(chan error, 1)
	client := serve(t, nil, func(ws *websocket.Conn, out *Conn) {
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					msg := fmt.Sprintf("%d:%d:%s", w, i, strings.Repeat("p", (w*i)%3000))
					if err := out.WriteMessage(websocket.MessageText, []byte(msg)); err != nil {
						t.Errorf("writer %d: %v", w, err)
						return
					}
				}
			})
		}
		wg.Wait()
		// The close handshake needs a reader for the client's close.
		go func() { _, _, _ = ws.Read(context.Background()) }()
		done <- ws.Close(websocket.StatusNormalClosure, "done")
	})
	next := make([]int, writers)
	for range writers * each {
		_, msg, err := client.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.SplitN(string(msg), ":", 3)
		if len(parts) != 3 {
			t.Fatalf("garbled message %.40q", msg)
		}
		var w, i int
		fmt.Sscan(parts[0], &w)
		fmt.Sscan(parts[1], &i)
		if w < 0 || w >= writers || i != next[w] || parts[2] != strings.Repeat("p", (w*i)%3000) {
			t.Fatalf("message %.40q: want writer %d's message %d, whole", msg, w, next[w])
		}
		next[w]++
	}
	_, _, err := client.Read(context.Background())
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after the messages: %v, want the close frame", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("close handshake: %v", err)
	}
}

// Ping reports whether the previous ping was answered: a reading client
// answers, one that does not read cannot.
func TestPingAnswered(t *testing.T) {
	for _, reads := range []bool{true, false} {
		t.Run(fmt.Sprintf("client reads %v", reads), func(t *testing.T) {
			pong := make(chan struct{}, 1)
			opts := &websocket.AcceptOptions{OnPongReceived: func(context.Context, []byte) { pong <- struct{}{} }}
			result := make(chan [2]bool, 1)
			client := serve(t, opts, func(ws *websocket.Conn, out *Conn) {
				defer ws.CloseNow()
				// The server reads, so pongs are seen.
				go func() { _, _, _ = ws.Read(context.Background()) }()
				first := out.Ping() // nothing to answer yet
				if reads {
					<-pong
				}
				result <- [2]bool{first, out.Ping()}
			})
			if reads {
				// Reading answers pings; the read ends when the server
				// closes.
				go func() { _, _, _ = client.Read(context.Background()) }()
			}
			if got := <-result; got != [2]bool{true, reads} {
				t.Fatalf("Ping answered = %v, want [true %v]", got, reads)
			}
		})
	}
}

// BenchmarkWriteAtDepth: 64 goroutines write 1 KiB messages to one
// connection over loopback while the client reads. "coalesced" goes
// through Conn.WriteMessage and reports its write calls per message;
// "per-message" is coder/websocket's own Write with a timeout, as the bus
// wrote before: one write call per message.
func BenchmarkWriteAtDepth(b *testing.B) {
	const writers = 64
	msg := []byte(strings.Repeat("x", 1024))
	for _, coalesced := range []bool{true, false} {
		name := map[bool]string{true: "coalesced", false: "per-message"}[coalesced]
		b.Run(name, func(b *testing.B) {
			start := make(chan struct{})
			var stats [2]uint64
			handler := func(w http.ResponseWriter, r *http.Request) {
				var write func() error
				var out *Conn
				var ws *websocket.Conn
				var err error
				if coalesced {
					ws, out, err = Accept(w, r, nil, 5*time.Second)
					write = func() error { return out.WriteMessage(websocket.MessageBinary, msg) }
				} else {
					ws, err = websocket.Accept(w, r, nil)
					write = func() error {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						return ws.Write(ctx, websocket.MessageBinary, msg)
					}
				}
				if err != nil {
					b.Error(err)
					return
				}
				defer ws.CloseNow()
				<-start
				var wg sync.WaitGroup
				for w := range writers {
					wg.Go(func() {
						for i := w; i < b.N; i += writers {
							if err := write(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				if out != nil {
					stats[0], stats[1] = out.Stats()
				}
				_, _, _ = ws.Read(context.Background()) // until the client closes
			}
			srv := httptest.NewServer(http.HandlerFunc(handler))
			defer srv.Close()
			client, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(msg)))
			b.ResetTimer()
			close(start)
			for range b.N {
				if _, _, err := client.Read(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			client.Close(websocket.StatusNormalClosure, "")
			if coalesced && stats[1] > 0 {
				b.ReportMetric(float64(stats[0])/float64(stats[1]), "writes/msg")
			}
		})
	}
}

// A frame too large for the room left in the queue waits its turn, and
// frames written after it wait behind it instead of taking the room it
// waits for: it cannot be starved by a stream of small ones.
func TestLargeFrameKeepsItsPlaceInLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, peer := pipe(t, 5*time.Second)
		errs := make(chan error, 3)
		go func() { errs <- c.WriteMessage(websocket.MessageText, []byte("first")) }()
		writing, _ := settled(c)
		require.True(t, writing, "the first write is not blocked in the pipe")
		if err := c.WriteMessage(websocket.MessageText, []byte("small-1")); err != nil {
			t.Fatal(err)
		}
		big := strings.Repeat("b", maxQueued)
		go func() { errs <- c.WriteMessage(websocket.MessageText, []byte(big)) }()
		_, lined := settled(c)
		require.Equal(t, uint64(1), lined, "the big frame waits its turn")
		go func() { errs <- c.WriteMessage(websocket.MessageText, []byte("small-2")) }()
		_, lined = settled(c)
		require.Equal(t, uint64(2), lined, "the small frame waits behind the big one")
		r := bufio.NewReader(peer)
		for _, want := range []string{"first", "small-1", big, "small-2"} {
			if _, p := readFrame(t, r); p != want {
				t.Fatalf("read %.16q (%d bytes), want %.16q", p, len(p), want)
			}
		}
		for range 3 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A goroutine that writes a batch with WriteMessageMore is not held by
// the socket: its first message is left to a goroutine of the Conn's,
// and the rest of the batch, the last written with WriteMessage, leave
// with it or together in the next write call, whole and in order.
func TestWriteMessageMoreBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, peer := pipe(t, 5*time.Second)
		for i := range 3 {
			require.NoError(t, c.WriteMessageMore(websocket.MessageText, []byte(fmt.Sprint("m", i))))
		}
		require.NoError(t, c.WriteMessage(websocket.MessageText, []byte("last")))
		writing, _ := settled(c)
		require.True(t, writing, "the first message is not being written by the Conn's goroutine")
		r := bufio.NewReader(peer)
		for _, want := range []string{"m0", "m1", "m2", "last"} {
			_, p := readFrame(t, r)
			require.Equal(t, want, p)
		}
		synctest.Wait()
		writes, frames := c.Stats()
		require.Equal(t, uint64(4), frames)
		// The Conn's goroutine may take the first message alone before
		// the rest are queued, or all of them at once.
		require.LessOrEqual(t, writes, uint64(2), "the batch after the first message left in one write call")
	})
}
