package bus

import "sync"

// Per-publisher order (docs/PROTOCOL.md, "Order"): the messages one
// connection publishes reach each subscriber in the order it sent them.
// Each sendMessage runs on a goroutine of its own, so the order is kept by
// tickets: in the order the requests arrive (handle), a message
// takes one ticket per subscriber of its chain from the lane between its
// publisher's connection and that subscriber's. Before writing its
// delivery to the subscriber, it waits for its ticket's turn; once the
// delivery is written, or will not be made (the chain stopped before it,
// the delivery failed before writing), the ticket is passed and the next
// one's turn comes. A message waits only for its predecessors' writes to
// the same subscriber, never for their answers or for other subscribers,
// so messages still overlap at depth.

// lane orders one publisher connection's deliveries to one subscriber
// connection.
type lane struct {
	// next is the next ticket to hand out; only the goroutine handling
	// the publisher's requests in order touches it.
	next uint64

	// mu guards the fields below.
	mu sync.Mutex
	// turn is the ticket whose delivery may be written now.
	turn uint64
	// early holds tickets passed before their turn (a skipped delivery
	// whose predecessor is still on its way); turn moves over them.
	early map[uint64]struct{}
	// waiting holds the channel of the ticket that waits for its turn, by
	// ticket: at most one waiter per ticket.
	waiting map[uint64]chan struct{}
}

// ticket is one message's place in one lane. The zero ticket (no lane)
// never waits: retries, holds and bus events keep no order.
type ticket struct {
	lane   *lane
	n      uint64
	passed bool
}

// lanes are a publisher connection's lanes, by subscriber connection;
// only the goroutine handling its requests in order touches them (handle).
type lanes struct {
	by map[subscriber]*lane
	// pruneAt is the size at which idle lanes to closed connections are
	// dropped, so a long-lived publisher does not keep one lane per
	// subscriber it ever reached.
	pruneAt int
}

// issue hands out one ticket per subscriber of chain, into tickets
// (reused when it is long enough). It runs on the publisher's read loop,
// so tickets are taken in the order the publisher sent its messages.
func (ls *lanes) issue(chain []*subscription, tickets []ticket) []ticket {
	if ls.by == nil {
		ls.by = make(map[subscriber]*lane)
		ls.pruneAt = 64
	}
	if cap(tickets) < len(chain) {
		// One allocation, not a doubling per growth: a fan-out can
		// have thousands.
		tickets = make([]ticket, 0, len(chain))
	}
	tickets = tickets[:0]
	for _, sub := range chain {
		l := ls.by[sub.to]
		if l == nil {
			if len(ls.by) >= ls.pruneAt {
				ls.prune()
			}
			l = &lane{}
			ls.by[sub.to] = l
		}
		tickets = append(tickets, ticket{lane: l, n: l.next})
		l.next++
	}
	return tickets
}

// prune drops the lanes to closed connections that no ticket waits on,
// and moves the next prune to twice the lanes left.
func (ls *lanes) prune() {
	for c, l := range ls.by {
		if !c.held().isClosed() {
			continue
		}
		l.mu.Lock()
		idle := l.turn == l.next
		l.mu.Unlock()
		if idle {
			delete(ls.by, c)
		}
	}
	ls.pruneAt = max(64, 2*len(ls.by))
}

// wait blocks until it is t's turn to write.
func (t *ticket) wait() {
	l := t.lane
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.turn == t.n {
		l.mu.Unlock()
		return
	}
	if l.waiting == nil {
		l.waiting = make(map[uint64]chan struct{})
	}
	ch := make(chan struct{})
	l.waiting[t.n] = ch
	l.mu.Unlock()
	<-ch
}

// ready reports whether it is t's turn to write, without waiting.
func (t *ticket) ready() bool {
	l := t.lane
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.turn == t.n
}

// pass gives the turn on: t's delivery is written or will not be made.
// Passing twice is harmless, so every path can pass; passing before t's
// turn (a delivery skipped while a predecessor is still on its way) is
// noted, and the turn moves over t when it gets there.
func (t *ticket) pass() {
	l := t.lane
	if l == nil || t.passed {
		return
	}
	t.passed = true
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.n != l.turn {
		if l.early == nil {
			l.early = make(map[uint64]struct{})
		}
		l.early[t.n] = struct{}{}
		return
	}
	l.turn++
	for {
		if _, ok := l.early[l.turn]; !ok {
			break
		}
		delete(l.early, l.turn)
		l.turn++
	}
	if ch, ok := l.waiting[l.turn]; ok {
		delete(l.waiting, l.turn)
		close(ch)
	}
}
