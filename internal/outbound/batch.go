package outbound

import "sync"

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

// release ends a hold; the last one writes what waits, on the caller's
// goroutine, unless a write is under way (its writer takes them).
func (c *Conn) release() {
	c.mu.Lock()
	c.holds--
	if c.holds > 0 || c.writing || c.err != nil || len(c.queued) == 0 {
		c.mu.Unlock()
		return
	}
	c.writing = true
	c.mu.Unlock()
	c.drain(nil, leaderRounds)
}
