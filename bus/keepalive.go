package bus

import (
	"sync"
	"time"
)

// pinger pings every connection once per PingInterval from one goroutine
// and drops a connection whose peer did not answer the previous ping, so
// an idle connection costs no goroutine and no timer of its own (only its
// read loop runs).
//
// Every connection shares the interval, so a connection rescheduled now
// is due after every connection already queued: a FIFO list is in due
// order without a heap, and each step is O(1). The list is intrusive
// (conn.pingPrev/pingNext), so joining and leaving allocate nothing.
type pinger struct {
	interval time.Duration
	// epoch anchors the monotonic due times (conn.pingDue).
	epoch time.Time

	// mu guards the list and every conn's ping fields; taken after any
	// other lock, never with another held inside it.
	mu         sync.Mutex
	head, tail *conn
	// due is tick's scratch list, kept between ticks.
	due []*conn

	stop     chan struct{}
	stopOnce sync.Once
}

func newPinger(interval time.Duration) *pinger {
	return &pinger{interval: interval, epoch: time.Now(), stop: make(chan struct{})}
}

// close ends run; Shutdown calls it once the peers are being closed.
func (p *pinger) close() {
	p.stopOnce.Do(func() { close(p.stop) })
}

// add schedules c's first ping one interval from now.
func (p *pinger) add(c *conn) {
	p.mu.Lock()
	p.pushLocked(c, time.Since(p.epoch)+p.interval)
	p.mu.Unlock()
}

// remove takes c off the schedule, if it is on it.
func (p *pinger) remove(c *conn) {
	p.mu.Lock()
	if c.pinged {
		p.unlinkLocked(c)
	}
	p.mu.Unlock()
}

func (p *pinger) pushLocked(c *conn, due time.Duration) {
	c.pingDue, c.pinged = due, true
	c.pingPrev, c.pingNext = p.tail, nil
	if p.tail != nil {
		p.tail.pingNext = c
	} else {
		p.head = c
	}
	p.tail = c
}

func (p *pinger) unlinkLocked(c *conn) {
	if c.pingPrev != nil {
		c.pingPrev.pingNext = c.pingNext
	} else {
		p.head = c.pingNext
	}
	if c.pingNext != nil {
		c.pingNext.pingPrev = c.pingPrev
	} else {
		p.tail = c.pingPrev
	}
	c.pingPrev, c.pingNext, c.pinged = nil, nil, false
}

// run pings until close. The timer never sleeps past the head's due
// time: a connection added later is due at least one interval from then,
// which is no earlier than the timer (at most one interval away).
func (p *pinger) run() {
	t := time.NewTimer(p.interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			t.Reset(p.tick())
		}
	}
}

// tick pings or drops every connection that is due, and returns how long
// until the next one is.
func (p *pinger) tick() time.Duration {
	now := time.Since(p.epoch)
	p.mu.Lock()
	due := p.due[:0]
	for c := p.head; c != nil && c.pingDue <= now; c = p.head {
		p.unlinkLocked(c)
		p.pushLocked(c, now+p.interval)
		due = append(due, c)
	}
	p.due = due
	p.mu.Unlock()
	for i, c := range due {
		// Ping only queues the frame, so one connection whose peer
		// stopped reading does not hold up the others.
		if !c.out.Ping() {
			c.pingLost()
		}
		due[i] = nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == nil {
		return p.interval
	}
	return max(p.head.pingDue-time.Since(p.epoch), 0)
}
