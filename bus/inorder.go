package bus

import (
	"sync"

	"github.com/bub-bus/bub/internal/rpcstream"
)

// init readies q for use.
func (q *inOrder) init() { q.room.L = &q.mu }

// inOrder runs a connection's requests that write to the cluster
// (initialize, subscribe, unsubscribe) off its read loop, and with them
// every request read while one of them waits, each in the order it came.
// A cluster write can wait seconds for JetStream during an election: the
// read loop meanwhile goes on reading the peer's pongs and its answers to
// processMessage calls, and the peer's requests keep their order. Its
// goroutine exists while it has requests.
type inOrder struct {
	// mu guards the fields below.
	mu      sync.Mutex
	queue   []*rpcstream.Request
	running bool
	// stopped is set once the read loop has ended: requests not yet
	// handled are dropped, since their answers cannot be written.
	stopped bool
	// room wakes the read loop waiting for room in a full queue.
	room sync.Cond
	runs sync.WaitGroup
}

// dispatch hands req to handle, on the read loop, or queues it for the
// connection's in-order goroutine when it writes to the cluster or other
// requests wait there. The queue holds at most MaxInFlight requests:
// beyond, the read loop waits for room, as it waited for each request
// before, rather than refuse a peer that sends many subscribes at once.
func (c *conn) dispatch(req *rpcstream.Request) {
	q := &c.inOrder
	q.mu.Lock()
	if !q.running && !c.server.methods[req.Method].inOrder {
		q.mu.Unlock()
		c.handle(req, true)
		return
	}
	if len(q.queue) >= cap(c.slots) {
		// What the batch produced so far must not wait with the read
		// loop.
		q.mu.Unlock()
		c.out.Batch().Flush()
		q.mu.Lock()
	}
	for len(q.queue) >= cap(c.slots) {
		q.room.Wait()
	}
	q.queue = append(q.queue, req)
	if !q.running {
		q.running = true
		q.runs.Add(1)
		go c.runInOrder()
	}
	q.mu.Unlock()
}

// runInOrder handles the queued requests one after another until none is
// left.
func (c *conn) runInOrder() {
	q := &c.inOrder
	defer q.runs.Done()
	for {
		q.mu.Lock()
		if len(q.queue) == 0 || q.stopped {
			q.queue = nil
			q.running = false
			q.mu.Unlock()
			return
		}
		req := q.queue[0]
		q.queue[0] = nil
		q.queue = q.queue[1:]
		q.room.Signal()
		q.mu.Unlock()
		c.handle(req, false)
	}
}

// stopInOrder drops the requests not yet handled and waits for the one
// being handled, so the connection's cleanup comes after it (an
// initialize's claim is then released).
func (c *conn) stopInOrder() {
	q := &c.inOrder
	q.mu.Lock()
	q.stopped = true
	q.mu.Unlock()
	q.runs.Wait()
}
