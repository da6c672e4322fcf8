// Package outbound gives a WebSocket connection, a server's (Accept) or a
// client's (Dial), a write path that coalesces: messages written while a
// write to the socket is under way leave together, in one write call, as
// soon as it returns; and a read path that takes everything the peer sent
// in one read call (read.go).
//
// # Why the frames are written here, not by coder/websocket
//
// coder/websocket flushes its bufio.Writer at the end of every message and
// holds its frame lock across that flush, so a message written through
// websocket.Conn.Write cannot be queued while another one is on its way to
// the socket: every message is one write call, whatever wraps the
// net.Conn underneath. A server's frames are unmasked and their header is
// 2 to 10 bytes, so Conn frames data messages itself and queues them under
// its own lock; coder/websocket still does all reading, the control frames
// it answers itself (pong, close) and the close handshake, and those reach
// the socket through the same queue (Conn is the net.Conn it was handed),
// so frames never interleave.
//
// # Flush on empty
//
// No goroutine and no timer wait for more messages. A writer that finds
// no write under way writes its own frame at once (no copy: header and
// payload go out in one writev) and then, before returning, writes
// whatever others queued meanwhile, all of it in one call; writers that
// find a write under way copy their frame into the queue and return
// (coder/websocket's own frames wait until theirs is written, so a close
// frame is never lost to the close that follows it). One
// message alone is therefore never delayed, and at depth the number of
// write calls falls to one per round trip of the socket, not one per
// message (NATS's flushOutbound works the same way). A writer drains at
// most a few rounds for others before it hands the queue to a goroutine of
// its own, so no caller is held hostage by a busy connection.
//
// # Batches
//
// On two cores, writers rarely overlap: a batch of requests read together
// wakes one goroutine per request, and they run one after another, each
// finding the socket free. So the writer that finds it free yields once
// (runtime.Gosched) before it writes: the goroutines runnable at that
// moment queue their frames behind its own, and all leave in its write
// call, as NATS flushes each connection once after a read's batch. With
// nothing else runnable the yield returns at once, so a lone message waits
// for no timer. A single goroutine writing a batch (the answers to what it
// read, Buffered) uses WriteMessageMore, which leaves the write to a
// goroutine of the Conn's, so the rest of the batch joins it.
//
// # Timeouts
//
// Every write call on the socket has the whole write timeout to finish
// (a deadline set before each call); one that does not fails the Conn: the
// socket is closed, so the peer is dropped, the reader sees the error and
// every later write returns it. The queue is bounded: a writer that finds
// it full waits for the write under way, which is itself bounded by the
// timeout, so nobody waits longer than about one write timeout.
package outbound

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// ErrCloseSent is returned for a message written after the close frame:
// WebSocket allows no data frame to follow it.
var ErrCloseSent = errors.New("outbound: close frame already sent")

// errNotControl refuses bytes from coder/websocket that are not one whole
// control frame: a data message written through websocket.Conn.Write
// could be flushed in pieces and interleave with queued frames.
var errNotControl = errors.New("outbound: data messages must be written with Conn.WriteMessage, not websocket.Conn.Write")

const (
	// maxQueued bounds the bytes queued behind the write under way; a
	// writer that would pass it waits. Beyond a few tens of KiB a larger
	// batch saves no measurable syscall time, and the bound keeps a slow
	// peer's backlog out of the heap.
	maxQueued = 256 << 10
	// leaderRounds is how many batches queued by others a writer sends
	// before it hands the rest to a goroutine (see drain).
	leaderRounds = 2
	// readBufferSize is coder/websocket's read buffer, which every
	// connection holds for good. Batching reads is the batchReader's job
	// (read.go), whose buffer is borrowed only while data waits, so this
	// one only has to hold a frame header: a larger one would save
	// copies, not system calls, and cost idle memory.
	readBufferSize = 512
	// controlBufferSize is coder/websocket's write buffer. Only control
	// frames pass through it (at most 2+125 bytes), so net/http's 4 KiB
	// would be idle memory in every connection.
	controlBufferSize = 256
	// maxHeader is the longest header of an unmasked frame.
	maxHeader = 10
)

// Conn is a hijacked connection whose writes are queued and coalesced. It
// is the net.Conn coder/websocket reads from and writes its own frames to;
// data messages go through WriteMessage.
type Conn struct {
	net.Conn
	timeout time.Duration
	// socket, when set, takes net.Buffers in one writev: the TCP
	// connection itself, or the one under a wrapper that only watches
	// it (one with Unwrap, as the bus's counted connections).
	socket *net.TCPConn
	// masked is set on a client's Conn (Dial): its data frames are
	// masked, as RFC 6455 requires of a client's.
	masked bool
	// handshaking is set on a client's Conn until the upgrade is done:
	// the HTTP request passes through Write as it is.
	handshaking atomic.Bool
	// rmu guards early and reader: the goroutine reading is not always
	// the same (coder/websocket's Close reads the peer's close frame
	// itself, and Park may run meanwhile on a goroutine resumed).
	rmu sync.Mutex
	// early holds bytes net/http read past the upgrade request; Read
	// hands them out first.
	early []byte
	// reader reads the socket in batches (read.go).
	reader batchReader
	// park is the Conn's state as Park sees it (park.go); parks is set
	// on a server's Conn that can park (AllowPark).
	park  parkState
	parks bool
	// onPong and onPing are the hooks Accept was given, which Park calls
	// as coder/websocket would for the frames it answers itself
	// (takeControl); with onPing set, pings are left to coder/websocket.
	onPong func(context.Context, []byte)
	onPing func(context.Context, []byte) bool
	// now is the writer's non-blocking write (release).
	now nowWrite
	// batch holds the Conns the goroutine handling what this Conn reads
	// wrote to; they are released before the next read from the socket
	// (batch.go).
	batch Batch

	// mu guards the fields below.
	mu sync.Mutex
	// room is signalled when the queue empties or the Conn fails.
	room sync.Cond
	// queued are frames waiting for the writer under way.
	queued []byte
	// writing is set while some goroutine owns the socket's write side:
	// it writes, then drains queued until empty. queued is empty while
	// writing is unset.
	writing bool
	// queuedSeq numbers the frames queued, writtenSeq is the last of
	// them known written: coder/websocket's own frames wait for it.
	queuedSeq, writtenSeq uint64
	// closeSent is set once a close frame is queued: no data may follow.
	closeSent bool
	// lined counts the data frames that have had to wait for room,
	// served those of them that have had their turn: frames wait in
	// that order (write).
	lined, served uint64
	// err is why the Conn failed; every later write returns it.
	err error
	// holds counts the batches holding the Conn's data frames back
	// (Hold): while it is not zero and no write is under way, they are
	// queued, not written, so queued may then be non-empty while writing
	// is unset.
	holds int

	// awaitingPong is set when a ping goes out and cleared by any pong.
	awaitingPong atomic.Bool

	// writes and frames count write calls on the socket and frames
	// written, for tests and benchmarks.
	writes, frames atomic.Uint64
}

// Accept is websocket.Accept with the hijacked connection wrapped in a
// Conn whose write calls each get timeout. Compression is refused, since
// Conn frames messages as they are.
func Accept(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions, timeout time.Duration) (*websocket.Conn, *Conn, error) {
	var o websocket.AcceptOptions
	if opts != nil {
		o = *opts
	}
	o.CompressionMode = websocket.CompressionDisabled
	// The callback holds conn, not h: h holds net/http's response, which
	// holds its connection's buffers, and would pin them for good.
	var conn *Conn
	h := &hijacker{ResponseWriter: w, timeout: timeout, conn: &conn}
	// Pongs arrive only after Accept returns, and Hijack sets conn
	// before it does.
	onPong := o.OnPongReceived
	o.OnPongReceived = func(ctx context.Context, payload []byte) {
		conn.awaitingPong.Store(false)
		if onPong != nil {
			onPong(ctx, payload)
		}
	}
	ws, err := websocket.Accept(h, r, &o)
	if err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		return nil, nil, err
	}
	conn.onPong, conn.onPing = onPong, o.OnPingReceived
	return ws, conn, nil
}

// hijacker hands coder/websocket a Conn in place of net/http's connection.
type hijacker struct {
	http.ResponseWriter
	timeout time.Duration
	conn    **Conn
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// net/http leaves the request's read deadline on the connection it
	// hands over; from here on the WebSocket's own timeouts apply.
	_ = nc.SetReadDeadline(time.Time{})
	c := newConn(nc, h.timeout)
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		c.early = append([]byte(nil), b...)
	}
	*h.conn = c
	// Fresh buffers over c, so that nothing holds net/http's once the
	// handler returns: coder/websocket re-wraps the reader around c
	// (which returns early first), and a 4 KiB writer would sit idle
	// (controlBufferSize).
	return c, bufio.NewReadWriter(bufio.NewReaderSize(c, readBufferSize), bufio.NewWriterSize(c, controlBufferSize)), nil
}

func newConn(nc net.Conn, timeout time.Duration) *Conn {
	c := &Conn{Conn: nc, timeout: timeout}
	c.socket = tcpUnder(nc)
	c.room.L = &c.mu
	c.reader.init(c.socket)
	return c
}

// tcpUnder returns the TCP connection nc is, or wraps with Unwrap; nil
// for any other (a TLS connection would make two records of a writev).
func tcpUnder(nc net.Conn) *net.TCPConn {
	for {
		switch c := nc.(type) {
		case *net.TCPConn:
			return c
		case interface{ Unwrap() net.Conn }:
			nc = c.Unwrap()
		default:
			return nil
		}
	}
}

// Read reads from the socket, after the bytes net/http had buffered.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.reader.frames.tooBig {
		return 0, ErrFrameTooBig
	}
	if len(c.early) > 0 {
		n := c.reader.handOut(p, c.early)
		c.early = c.early[n:]
		if len(c.early) == 0 {
			c.early = nil
		}
		return n, nil
	}
	if len(c.reader.ahead) == 0 {
		// Everything read so far is handled: what it produced leaves
		// now, before a read that may wait for the peer.
		c.batch.Flush()
	}
	if c.reader.raw == nil {
		return c.Conn.Read(p) // not a TCP socket: TLS reads by records
	}
	return c.reader.read(p)
}

// WriteMessage writes p as one unfragmented text or binary message. It
// returns once the frame is written or queued behind a write under way; an
// error means the Conn has failed (and closed) or sent its close frame.
// The caller may reuse p when it returns.
func (c *Conn) WriteMessage(typ websocket.MessageType, p []byte) error {
	return c.writeMessage(typ, p, false)
}

// WriteMessageMore is WriteMessage for a goroutine that has more messages
// to write at once, such as the rest of a batch it read (Buffered): when
// the socket is free, p is queued and a goroutine writes it, instead of
// the caller, so that the messages the caller writes next join it in one
// write call. Write a batch's last message with WriteMessage, so that it
// leaves at once.
func (c *Conn) WriteMessageMore(typ websocket.MessageType, p []byte) error {
	return c.writeMessage(typ, p, true)
}

func (c *Conn) writeMessage(typ websocket.MessageType, p []byte, async bool) error {
	var h [maxHeader + 4]byte
	if c.masked {
		return c.writeMasked(h[:0], byte(typ), p, async)
	}
	return c.write(header(h[:0], byte(typ), len(p)), p, false, async)
}

// Buffered returns how many bytes the Conn has read from the socket and
// not yet handed to the reader above it: the rest of a batch of frames
// the peer sent together, so a reader can tell whether more follow at
// once. Only the reading goroutine may call it.
func (c *Conn) Buffered() int {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return len(c.early) + len(c.reader.ahead)
}

// Ping reports whether the peer answered the previous ping (a pong arrived
// since it was sent; true for the first call) and, if so, queues a new one
// and returns at once: when no write is under way a goroutine writes it,
// so a caller that pings many connections is never held by one whose peer
// stopped reading. A Conn that failed never answers. Only a server's Conn
// (Accept) pings: its ping frame is unmasked, and Accept hooks the pongs.
func (c *Conn) Ping() (answered bool) {
	if c.awaitingPong.Swap(true) {
		return false
	}
	return c.write(pingFrame, nil, true, true) == nil
}

// pingFrame is a ping with no payload; a pong answers it whatever it
// carries.
var pingFrame = []byte{0x80 | opPing, 0}

// Write takes coder/websocket's own frames (pong, close, ping), one whole
// control frame per call; see errNotControl. On a client's Conn it takes
// the HTTP upgrade request as it is, until Dial has the upgrade.
func (c *Conn) Write(p []byte) (int, error) {
	if c.handshaking.Load() {
		return c.Conn.Write(p)
	}
	if !isControlFrame(p) {
		return 0, errNotControl
	}
	if err := c.write(nil, p, true, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close fails every later write with net.ErrClosed and closes the socket,
// which ends a write under way. It never waits.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.queued = nil
	c.room.Broadcast()
	c.mu.Unlock()
	err := c.Conn.Close()
	c.unpark()
	return err
}

// Stats returns how many write calls the socket has taken and how many
// frames they carried.
func (c *Conn) Stats() (writes, frames uint64) {
	return c.writes.Load(), c.frames.Load()
}

// write sends the frame h+p (h may be nil when p is a whole frame). A
// control frame is never held back by the queue's bound. With async, a
// writer that finds the socket free leaves the write to a goroutine.
func (c *Conn) write(h, p []byte, control, async bool) error {
	c.mu.Lock()
	// A data frame that has to wait for room takes a place in line, and
	// frames behind it wait their turn: otherwise small frames arriving
	// while the queue drains could take the room a large one waits for,
	// again and again, while the socket makes progress and no write
	// timeout fires. Control frames never wait for room, so they skip
	// the line.
	var ticket uint64
	waiting := false
	leave := func() {
		if waiting {
			c.served++
			c.room.Broadcast()
		}
	}
	for {
		if c.err != nil {
			err := c.err
			leave()
			c.mu.Unlock()
			return err
		}
		if c.closeSent && !(control && h == nil) {
			leave()
			c.mu.Unlock()
			return ErrCloseSent
		}
		turn := control || (waiting && ticket == c.served) || (!waiting && c.served == c.lined)
		if !c.writing && turn {
			if c.holds > 0 && !control && len(c.queued)+len(h)+len(p) <= maxQueued {
				// Held (Hold): the frame waits for the batch's end.
				leave()
				c.enqueueLocked(h, p)
				c.mu.Unlock()
				return nil
			}
			leave()
			break
		}
		if turn && (control || len(c.queued) == 0 || len(c.queued)+len(h)+len(p) <= maxQueued) {
			leave()
			if control && h == nil && p[0]&0x0f == opClose {
				c.closeSent = true
			}
			c.enqueueLocked(h, p)
			if h == nil {
				// coder/websocket's frame (a close, a pong) is on the
				// wire when Write returns, as with a plain net.Conn: a
				// close frame must not be lost to the Close that
				// follows it.
				seq := c.queuedSeq
				for c.err == nil && c.writtenSeq < seq {
					c.room.Wait()
				}
				err := c.err
				c.mu.Unlock()
				return err
			}
			c.mu.Unlock()
			return nil
		}
		if !waiting {
			ticket, waiting = c.lined, true
			c.lined++
		}
		c.room.Wait()
	}
	if control && h == nil && p[0]&0x0f == opClose {
		c.closeSent = true
	}
	c.writing = true
	if async {
		c.enqueueLocked(h, p)
		c.mu.Unlock()
		go c.drain(nil, -1)
		return nil
	}
	// Frames held back (Hold) go before this one: a control frame, or a
	// data frame the full queue has no room for, takes the socket while
	// the Conn is held.
	held := c.queued
	c.queued = nil
	c.frames.Add(1)
	c.mu.Unlock()
	// Let the goroutines that are runnable now queue their frames behind
	// this one before it leaves: a batch of requests read together wakes
	// one goroutine per request, and on few cores they run one after
	// another, so without this each would find the socket free and make
	// a write call of its own. With nothing else runnable, Gosched
	// returns at once: a lone message is not held back.
	runtime.Gosched()
	c.mu.Lock()
	more, end := c.queued, c.queuedSeq
	c.queued = nil
	if more != nil {
		c.room.Broadcast()
	}
	c.mu.Unlock()
	err := c.sendFrame(held, h, p, more)
	putBuffer(held)
	if err != nil {
		c.fail(err)
		return c.failure()
	}
	if more != nil || held != nil {
		c.mu.Lock()
		c.writtenSeq = end
		c.room.Broadcast()
		c.mu.Unlock()
	}
	c.drain(more, leaderRounds)
	return nil
}

// sendFrame writes the frames held before it, the frame h+p (h nil when
// p is a whole frame) and the frames queued after it, more, in one write
// call: a writev on a TCP socket, so that p is not copied; a copy into
// one buffer otherwise, since a TLS connection would make a record of
// each part.
func (c *Conn) sendFrame(held, h, p, more []byte) error {
	switch {
	case held == nil && h == nil && more == nil:
		return c.send(p)
	case c.socket != nil:
		return c.sendv(held, h, p, more)
	default:
		b := getBuffer()
		b = append(append(append(append(b, held...), h...), p...), more...)
		err := c.send(b)
		putBuffer(b)
		return err
	}
}

// enqueueLocked appends the frame h+p to the queue.
func (c *Conn) enqueueLocked(h, p []byte) {
	if c.queued == nil {
		c.queued = getBuffer()
	}
	c.queued = append(append(c.queued, h...), p...)
	c.queuedSeq++
	c.frames.Add(1)
}

// releaseLocked ends a drain: the socket is free again, and the queue's
// buffers go back to the pool, so an idle Conn holds none.
func (c *Conn) releaseLocked(spare []byte) {
	c.writing = false
	putBuffer(c.queued)
	putBuffer(spare)
	c.queued = nil
	c.room.Broadcast()
}

// drain writes what others queued until the queue is empty, the Conn
// fails, or rounds batches went out (rounds < 0: no bound); then, if more
// is queued, it hands the socket to a new goroutine that drains without
// bound. The caller owns the socket (writing is set); drain releases it.
// spare is a buffer to queue into next, to spare an allocation.
func (c *Conn) drain(spare []byte, rounds int) {
	for ; rounds != 0; rounds-- {
		c.mu.Lock()
		if c.err != nil || len(c.queued) == 0 {
			c.releaseLocked(spare)
			c.mu.Unlock()
			return
		}
		out, end := c.queued, c.queuedSeq
		c.queued = spare[:0]
		c.room.Broadcast()
		c.mu.Unlock()
		if err := c.send(out); err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		c.writtenSeq = end
		c.room.Broadcast()
		c.mu.Unlock()
		spare = out
	}
	c.mu.Lock()
	if c.err != nil || len(c.queued) == 0 {
		c.releaseLocked(spare)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.drain(spare, -1)
}

// bufferPool holds queue buffers between bursts, as *[]byte; boxPool
// holds the *[]byte emptied by getBuffer, so that putBuffer does not
// allocate one for every buffer it pools (&b would escape).
var bufferPool, boxPool sync.Pool

func getBuffer() []byte {
	if v, ok := bufferPool.Get().(*[]byte); ok {
		b := (*v)[:0]
		*v = nil
		boxPool.Put(v)
		return b
	}
	return make([]byte, 0, 4096)
}

// putBuffer pools b unless it is nil or larger than a full queue, so one
// huge message does not pin its buffer.
func putBuffer(b []byte) {
	if b == nil || cap(b) > 2*maxQueued {
		return
	}
	v, _ := boxPool.Get().(*[]byte)
	if v == nil {
		v = new([]byte)
	}
	*v = b
	bufferPool.Put(v)
}

// send writes b with a fresh deadline.
func (c *Conn) send(b []byte) error {
	c.writes.Add(1)
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	_, err := c.Conn.Write(b)
	return err
}

// sendv writes the frames held, h+p and more in one writev with a fresh
// deadline. The vector and a copy of the header are borrowed from a pool
// (a vector of the caller's would escape to the heap at every write, and
// the header with it); the parts themselves are not copied.
func (c *Conn) sendv(held, h, p, more []byte) error {
	c.writes.Add(1)
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	v := vectorPool.Get().(*vector)
	v.parts = [...][]byte{held, v.header[:copy(v.header[:], h)], p, more}
	v.bufs = v.parts[:]
	_, err := v.bufs.WriteTo(c.socket)
	v.parts, v.bufs = [4][]byte{}, nil
	vectorPool.Put(v)
	return err
}

// vector is what one writev of sendv takes.
type vector struct {
	header [maxHeader + 4]byte
	parts  [4][]byte
	bufs   net.Buffers
}

var vectorPool = sync.Pool{New: func() any { return new(vector) }}

// fail records err as the Conn's failure, unless it already failed,
// releases the socket and closes it, so the reader ends too.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf("outbound: write to %s: %w", c.Conn.RemoteAddr(), err)
	}
	c.writing = false
	c.queued = nil
	c.room.Broadcast()
	c.mu.Unlock()
	_ = c.Conn.Close()
	c.unpark()
}

func (c *Conn) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// WebSocket opcodes Conn writes or recognises (RFC 6455, section 5.2).
const (
	opClose = 0x8
	opPing  = 0x9
)

// header appends the header of an unmasked, final frame with opcode op and
// a payload of n bytes to b.
func header(b []byte, op byte, n int) []byte {
	b = append(b, 0x80|op)
	switch {
	case n < 126:
		return append(b, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, 126), uint16(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, 127), uint64(n))
	}
}

// isControlFrame reports whether p is exactly one final control frame,
// unmasked (a server's) or masked (a client's).
func isControlFrame(p []byte) bool {
	if len(p) < 2 || p[0]&0x80 == 0 || p[0]&0x0f < 0x8 || p[1]&0x7f > 125 {
		return false
	}
	n := 2 + int(p[1]&0x7f)
	if p[1]&0x80 != 0 {
		n += 4
	}
	return len(p) == n
}
