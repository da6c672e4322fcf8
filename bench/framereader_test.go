package main

// Frame readers head to head (issue 27, item 1): the same stream of masked
// client text frames of JSON, read by
//
//   - coder/websocket's Reader as the bus reads it: behind outbound.Accept,
//     each message read whole into a pooled buffer and copied out at its
//     size (rpcstream's read), then checked for UTF-8 (the Stream does it);
//   - gobwas/ws's frame API: ReadHeaderBuffer, CheckHeader, the payload
//     read into a buffer of its own size, Cipher to unmask, the same UTF-8
//     check; reading through a 64 KiB bufio.Reader, the batch reader's size;
//   - lesismal/nbio's parser (websocket.Conn.Parse) outside its event loop,
//     fed what a read returned, with the message copied out of its pooled
//     payload (the bus keeps payloads as slices of the message).
//
// Every reader hands the bus a message buffer of its own per frame, so the
// one allocation each is the same. "mem" benchmarks read from a connection
// in memory that returns one chunk (one frame, or a burst of 64) per Read,
// as a socket returns what one write put there: they measure the parsers.
// "tcp" benchmarks read from a loopback TCP socket that a goroutine of the
// benchmark keeps writing, so the read system calls and the netpoller's
// wake-ups are in the figure (coder/websocket through outbound's batch
// reader, gobwas through bufio on the net.TCPConn).
//
// Run: go test -run '^$' -bench FrameRead -benchmem -count 5 .
// ns/op, B/op and allocs/op are per frame.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bub-bus/bub/internal/outbound"
	"github.com/coder/websocket"
	"github.com/gobwas/ws"
	nbws "github.com/lesismal/nbio/nbhttp/websocket"
)

// frameCase is one stream: frames of size bytes of payload, written
// perRead frames at a time.
type frameCase struct {
	name    string
	size    int
	perRead int
}

var frameCases = []frameCase{
	{"1KiB", 1 << 10, 1},
	{"1KiBx64", 1 << 10, 64},
	{"64KiB", 64 << 10, 1},
}

// frameReadLimit is the largest message a reader accepts.
const frameReadLimit = 8 << 20

// jsonPayload is a JSON-RPC request of exactly size bytes.
func jsonPayload(size int) []byte {
	head := `{"jsonrpc":"2.0","method":"sendMessage","id":17,"params":{"to":"agent.b","data":"`
	tail := `"}}`
	return []byte(head + strings.Repeat("é", (size-len(head)-len(tail))/2) + strings.Repeat("x", (size-len(head)-len(tail))%2) + tail)
}

// maskedFrames returns n masked text frames of payload, each with its own
// key, as a client sends them.
func maskedFrames(payload []byte, n int) []byte {
	var out bytes.Buffer
	for i := range n {
		key := [4]byte{byte(i), 0x5a, byte(i >> 8), 0xc3}
		h := ws.Header{Fin: true, OpCode: ws.OpText, Masked: true, Mask: key, Length: int64(len(payload))}
		if err := ws.WriteHeader(&out, h); err != nil {
			panic(err)
		}
		p := bytes.Clone(payload)
		ws.Cipher(p, key, 0)
		out.Write(p)
	}
	return out.Bytes()
}

// replayConn is a net.Conn whose Read hands out chunk again and again,
// never more than the rest of one chunk per call; writes are discarded.
type replayConn struct {
	chunk []byte
	pos   int
}

func (c *replayConn) Read(p []byte) (int, error) {
	n := copy(p, c.chunk[c.pos:])
	c.pos += n
	if c.pos == len(c.chunk) {
		c.pos = 0
	}
	return n, nil
}
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }

// hijackWriter is the http.ResponseWriter outbound.Accept upgrades: it
// hands over conn when hijacked.
type hijackWriter struct {
	header http.Header
	conn   net.Conn
}

func (w *hijackWriter) Header() http.Header         { return w.header }
func (w *hijackWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *hijackWriter) WriteHeader(int)             {}
func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, bufio.NewReadWriter(bufio.NewReader(w.conn), bufio.NewWriter(w.conn)), nil
}

// upgradeRequest is a client's WebSocket upgrade request.
func upgradeRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	return r
}

// frameSink is what the bus does with a message a reader hands it: checks
// it is UTF-8 and keeps it.
type frameSink struct{ last []byte }

func (s *frameSink) take(msg []byte) error {
	if !utf8.Valid(msg) {
		return errors.New("text message is not valid UTF-8")
	}
	s.last = msg
	return nil
}

// coderReader reads messages as rpcstream's Stream does.
type coderReader struct {
	ws   *websocket.Conn
	sink frameSink
}

var coderBufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (r *coderReader) next() error {
	_, rd, err := r.ws.Reader(context.Background())
	if err != nil {
		return err
	}
	buf := coderBufPool.Get().(*bytes.Buffer)
	defer func() { buf.Reset(); coderBufPool.Put(buf) }()
	if _, err := buf.ReadFrom(rd); err != nil {
		return err
	}
	return r.sink.take(bytes.Clone(buf.Bytes()))
}

// gobwasReader reads one frame with gobwas/ws's frame API. A reader the
// bus could use would also have to join fragments, answer control frames
// and check close codes; these streams have none, so only the per-frame
// work is here.
type gobwasReader struct {
	br   *bufio.Reader
	hb   []byte
	sink frameSink
}

func newGobwasReader(c net.Conn) *gobwasReader {
	return &gobwasReader{br: bufio.NewReaderSize(c, 64<<10), hb: make([]byte, ws.MaxHeaderSize-2)}
}

func (r *gobwasReader) next() error {
	h, err := ws.ReadHeaderBuffer(r.br, r.hb)
	if err != nil {
		return err
	}
	if err := ws.CheckHeader(h, ws.StateServerSide); err != nil {
		return err
	}
	if h.Length > frameReadLimit {
		return fmt.Errorf("frame of %d bytes is over the limit", h.Length)
	}
	if h.OpCode != ws.OpText || !h.Fin {
		return fmt.Errorf("unexpected frame %v", h.OpCode)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(r.br, p); err != nil {
		return err
	}
	ws.Cipher(p, h.Mask, 0)
	return r.sink.take(p)
}

// nbioParser is nbio's websocket parser without its event loop: the
// caller reads and hands the bytes to Parse, which calls back per message.
type nbioParser struct {
	conn *nbws.Conn
	got  int
	sink frameSink
	err  error
}

func newNbioParser(c net.Conn) *nbioParser {
	p := &nbioParser{}
	u := nbws.NewUpgrader()
	u.KeepaliveTime = 0
	u.MessageLengthLimit = frameReadLimit
	u.OnMessage(func(_ *nbws.Conn, _ nbws.MessageType, data []byte) {
		p.got++
		// data goes back to nbio's pool when this returns.
		if err := p.sink.take(bytes.Clone(data)); err != nil {
			p.err = err
		}
	})
	p.conn = nbws.NewServerConn(u, c, "", false, false)
	// Run the handler on the parsing goroutine, as the bus handles a
	// message on its read loop.
	p.conn.Execute = func(f func()) bool { f(); return true }
	return p
}

// readFrames reads n frames with nbio from c, in reads of up to 64 KiB.
func (p *nbioParser) readFrames(c net.Conn, buf []byte, n int) error {
	p.got = 0
	for p.got < n {
		k, err := c.Read(buf)
		if err != nil {
			return err
		}
		if err := p.conn.Parse(buf[:k]); err != nil {
			return err
		}
		if p.err != nil {
			return p.err
		}
	}
	return nil
}

func BenchmarkFrameReadMem(b *testing.B) {
	for _, fc := range frameCases {
		payload := jsonPayload(fc.size)
		chunk := maskedFrames(payload, fc.perRead)
		// floor is what every reader pays whatever it is: the message's
		// own copy and its UTF-8 check, with no frame parsed.
		b.Run("floor/"+fc.name, func(b *testing.B) {
			var sink frameSink
			readEach(b, fc.size, func() error { return sink.take(bytes.Clone(payload)) })
		})
		b.Run("coder/"+fc.name, func(b *testing.B) {
			w := &hijackWriter{header: http.Header{}, conn: &replayConn{chunk: chunk}}
			c, _, err := outbound.Accept(w, upgradeRequest(), nil, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			c.SetReadLimit(frameReadLimit)
			readEach(b, fc.size, (&coderReader{ws: c}).next)
		})
		b.Run("gobwas/"+fc.name, func(b *testing.B) {
			readEach(b, fc.size, newGobwasReader(&replayConn{chunk: chunk}).next)
		})
		b.Run("nbio/"+fc.name, func(b *testing.B) {
			conn := &replayConn{chunk: chunk}
			p := newNbioParser(conn)
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(fc.size))
			b.ReportAllocs()
			b.ResetTimer()
			// nbio parses what a read returned at once, so it reads
			// b.N frames rounded up to whole chunks (at most 63 more).
			if err := p.readFrames(conn, buf, b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// readEach times next, which reads one frame of size bytes, in b's loop;
// b.Loop stops the timer when it ends, before what the caller does next
// (waiting for a feeder, say).
func readEach(b *testing.B, size int, next func() error) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if err := next(); err != nil {
			b.Fatal(err)
		}
	}
}

// tcpFrameServer accepts loopback connections and hands each one's
// server side over: the WebSocket Conn after outbound.Accept on "/ws",
// the bare TCP connection (after a canned 101) on "/raw".
type tcpFrameServer struct {
	srv   *httptest.Server
	coder chan *websocket.Conn
	raw   chan net.Conn
}

func newTCPFrameServer(b *testing.B) *tcpFrameServer {
	s := &tcpFrameServer{coder: make(chan *websocket.Conn, 1), raw: make(chan net.Conn, 1)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			c, _, err := outbound.Accept(w, r, nil, time.Minute)
			if err != nil {
				return
			}
			c.SetReadLimit(frameReadLimit)
			s.coder <- c
			return
		}
		nc, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		s.raw <- nc
	}))
	b.Cleanup(s.srv.Close)
	return s
}

// dial opens a connection on path, reads the 101 and returns the client
// side, which the caller writes frames to.
func (s *tcpFrameServer) dial(b *testing.B, path string) net.Conn {
	c, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path)
	// Read the response byte by byte, so no frame bytes are consumed.
	var resp []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(resp, []byte("\r\n\r\n")) {
		if _, err := c.Read(one); err != nil {
			b.Fatal(err)
		}
		resp = append(resp, one[0])
	}
	if !bytes.HasPrefix(resp, []byte("HTTP/1.1 101")) {
		b.Fatalf("upgrade refused: %q", resp)
	}
	return c
}

// feed writes chunk to c until stop is closed or the write fails, one
// Write per chunk; the returned wait waits for it to end.
func feed(c net.Conn, chunk []byte, stop chan struct{}) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	return func() { close(stop); _ = c.Close(); <-done }
}

func BenchmarkFrameReadTCP(b *testing.B) {
	s := newTCPFrameServer(b)
	for _, fc := range frameCases {
		chunk := maskedFrames(jsonPayload(fc.size), fc.perRead)
		b.Run("coder/"+fc.name, func(b *testing.B) {
			client := s.dial(b, "/ws")
			r := &coderReader{ws: <-s.coder}
			wait := feed(client, chunk, make(chan struct{}))
			readEach(b, fc.size, r.next)
			wait()
		})
		b.Run("gobwas/"+fc.name, func(b *testing.B) {
			client := s.dial(b, "/raw")
			srv := <-s.raw
			b.Cleanup(func() { _ = srv.Close() })
			r := newGobwasReader(srv)
			wait := feed(client, chunk, make(chan struct{}))
			readEach(b, fc.size, r.next)
			wait()
		})
		b.Run("nbio/"+fc.name, func(b *testing.B) {
			client := s.dial(b, "/raw")
			srv := <-s.raw
			b.Cleanup(func() { _ = srv.Close() })
			p := newNbioParser(srv)
			buf := make([]byte, 64<<10)
			wait := feed(client, chunk, make(chan struct{}))
			b.SetBytes(int64(fc.size))
			b.ReportAllocs()
			b.ResetTimer()
			if err := p.readFrames(srv, buf, b.N); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			wait()
		})
	}
}

// TestFrameReadersAgree checks the benchmarks measure readers that
// decode the same stream to the same messages, so the figures compare
// like with like.
func TestFrameReadersAgree(t *testing.T) {
	for _, fc := range frameCases {
		t.Run(fc.name, func(t *testing.T) {
			payload := jsonPayload(fc.size)
			if len(payload) != fc.size || !utf8.Valid(payload) {
				t.Fatalf("payload of %d bytes, want %d of UTF-8", len(payload), fc.size)
			}
			chunk := maskedFrames(payload, fc.perRead)
			w := &hijackWriter{header: http.Header{}, conn: &replayConn{chunk: chunk}}
			c, _, err := outbound.Accept(w, upgradeRequest(), nil, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			c.SetReadLimit(frameReadLimit)
			cr := &coderReader{ws: c}
			gr := newGobwasReader(&replayConn{chunk: chunk})
			nconn := &replayConn{chunk: chunk}
			np := newNbioParser(nconn)
			for i := range 2 * fc.perRead {
				if err := cr.next(); err != nil {
					t.Fatalf("coder frame %d: %v", i, err)
				}
				if err := gr.next(); err != nil {
					t.Fatalf("gobwas frame %d: %v", i, err)
				}
				if !bytes.Equal(cr.sink.last, payload) || !bytes.Equal(gr.sink.last, payload) {
					t.Fatalf("frame %d: readers decoded something else than the payload", i)
				}
			}
			if err := np.readFrames(nconn, make([]byte, 64<<10), 2*fc.perRead); err != nil {
				t.Fatal(err)
			}
			if np.got != 2*fc.perRead || !bytes.Equal(np.sink.last, payload) {
				t.Fatalf("nbio: %d messages, last equal %v", np.got, bytes.Equal(np.sink.last, payload))
			}
		})
	}
}
