package outbound

import (
	"os"
	"sync"
	"syscall"
	"time"
)

// Flushing once per batch
//
// NATS handles every message of a read buffer before it writes anything:
// what the messages produce is queued on the connections it goes to, and
// each connection touched is flushed once, after the read (its
// flushClients). A Batch does the same for a goroutine that handles what
// it reads itself, without a goroutine per request: it holds every Conn
// it writes to (Hold), so their frames wait in the queue, and releases
// them all before its next read from the socket, which writes each one's
// frames in one write call. A lone message therefore waits for nothing
// but the end of its own handling (no timer); a batch of N requests costs
// a write call per destination, not N.

// maxHeld bounds the Conns one batch holds; the batch is flushed before it
// holds another. Released early, frames only leave sooner, so the bound
// costs nothing but a write call, and it keeps Hold's search short.
const maxHeld = 16

// Batch is the set of Conns a goroutine holds while it handles a batch.
// The zero value is ready.
type Batch struct {
	// mu guards held: the goroutine reading a Conn is not always the one
	// that handles what it reads (coder/websocket's Close reads the
	// peer's close frame itself), so a flush before a read may come from
	// another goroutine.
	mu   sync.Mutex
	held []*Conn
}

// Hold holds c's data frames back until the batch is flushed. Holding
// the same Conn again in the same batch changes nothing.
func (b *Batch) Hold(c *Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.held {
		if h == c {
			return
		}
	}
	if len(b.held) == maxHeld {
		b.flushLocked()
	}
	c.hold()
	b.held = append(b.held, c)
}

// Flush releases every Conn the batch holds, writing what waits in each.
func (b *Batch) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}

func (b *Batch) flushLocked() {
	for i, c := range b.held {
		b.held[i] = nil
		c.release()
	}
	b.held = b.held[:0]
}

// Batch returns the batch of the goroutine handling what c reads: the
// Conns held in it are released before c's next read from the socket,
// and when that goroutine calls Flush.
func (c *Conn) Batch() *Batch { return &c.batch }

// hold makes data frames wait in the queue until release, unless the
// queue is full (write). Holds nest: the frames leave at the last release.
// Control frames are never held back.
func (c *Conn) hold() {
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
}

// release ends a hold; the last one writes what waits, unless a write is
// under way (its writer takes them). The caller is another connection's
// read loop, which must not wait on this peer: it writes what the socket
// takes at once, without waiting, and leaves the rest, if any, to a
// goroutine of the Conn's, which writes it under the write timeout.
func (c *Conn) release() {
	c.mu.Lock()
	c.holds--
	if c.holds > 0 || c.writing || c.err != nil || len(c.queued) == 0 {
		c.mu.Unlock()
		return
	}
	c.writing = true
	out, end := c.queued, c.queuedSeq
	c.queued = nil
	c.room.Broadcast()
	c.mu.Unlock()
	n, err := c.sendNow(out)
	if err != nil {
		putBuffer(out)
		c.fail(err)
		return
	}
	c.mu.Lock()
	if n < len(out) {
		// The rest goes first, before what was queued meanwhile.
		rest := append(getBuffer(), out[n:]...)
		c.queued = append(rest, c.queued...)
		c.mu.Unlock()
		putBuffer(out)
		go c.drain(nil, -1)
		return
	}
	c.writtenSeq = end
	if len(c.queued) == 0 || c.err != nil {
		c.releaseLocked(out)
		c.mu.Unlock()
		return
	}
	c.room.Broadcast()
	c.mu.Unlock()
	// Queued meanwhile, by writers that found this write under way.
	go c.drain(out, -1)
}

// HasRoom reports whether n more bytes fit in the queue now, so that a
// goroutine that must not wait (a read loop) can tell whether a message
// would be queued or would have to wait for the peer.
func (c *Conn) HasRoom(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil && c.served == c.lined && len(c.queued)+n <= maxQueued
}

// sendNow writes what of b the socket takes without waiting, and returns
// how much that was: nothing on a Conn that is not a TCP socket.
func (c *Conn) sendNow(b []byte) (int, error) {
	if c.reader.raw == nil {
		return 0, nil
	}
	c.writes.Add(1)
	c.now.b = b
	if c.now.fn == nil {
		c.now.fn = c.writeNow
	}
	// RawConn.Write refuses at once when the write deadline has passed,
	// before it tries the socket: without a fresh deadline, the one the
	// last blocking write set (or net/http's, before the hijack) would
	// fail the Conn once a busy connection had written only through here
	// for a whole write timeout.
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	if err := c.reader.raw.Write(c.now.fn); err != nil {
		return 0, err
	}
	n, err := c.now.n, c.now.err
	c.now = nowWrite{fn: c.now.fn}
	if err == syscall.EAGAIN {
		return max(n, 0), nil
	}
	if err != nil {
		return 0, os.NewSyscallError("write", err)
	}
	return n, nil
}

// nowWrite is sendNow's call: the RawConn callback as a func value made
// once, its bytes and its results, so that a write allocates nothing.
// Only the Conn's writer (writing set) touches it.
type nowWrite struct {
	fn  func(fd uintptr) bool
	b   []byte
	n   int
	err error
}

// writeNow is the RawConn callback of sendNow: one write, and no wait for
// the socket to take more (it returns true even when the socket is full).
func (c *Conn) writeNow(fd uintptr) bool {
	for {
		n, err := syscall.Write(int(fd), c.now.b)
		if err == syscall.EINTR {
			continue
		}
		c.now.n, c.now.err = n, err
		return true
	}
}
