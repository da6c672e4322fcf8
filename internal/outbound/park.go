package outbound

import "time"

// Parking idle connections
//
// A goroutine per connection waiting in coder/websocket's Read costs its
// stack, 4 KiB once the connection has handled a request or two, and an
// idle connection needs nothing else of it: most of what is left of an
// idle connection's memory (docs/BENCHMARKS.md, "Idle connection
// memory"). So the goroutine reading a server's Conn, at the end of each
// message, parks the Conn instead of waiting (Park): when nothing waits
// in any buffer above the socket and the socket has had nothing for a
// moment (parkLinger), the socket is handed to a poller of its own (one
// epoll instance for the process, on Linux; park_linux.go) and the
// goroutine ends. When the
// socket turns readable or the peer hangs up, or the Conn is closed by
// anyone, a new goroutine is started to read on. Pongs to the
// keepalive's pings (and the peer's pings) are answered by Park itself,
// so they wake an idle Conn only for as long as that takes.
//
// Elsewhere, or on a connection that is not a TCP socket (TLS buffers
// records above the socket), Park does nothing and the goroutine waits
// in Read as before.

// parkLinger is how long a Conn with nothing to read waits for its peer
// before it parks. Parking and resuming cost a system call to arm the
// socket, a wake-up of the poller and a new goroutine whose stack grows
// again as it reads, about as much again as the message itself at one
// request in flight; a busy connection's next message comes well within
// this, so only a connection idle for longer parks, at most 20 times a
// second. Waiting costs a deadline set and cleared.
const parkLinger = 50 * time.Millisecond

// AllowPark lets c park (Park), if it is a server's Conn (Accept) over
// a TCP socket and the platform has a poller; it reports whether c can.
// Call it before c is first read: from then on, what c hands
// coder/websocket stops at the end of each frame (frames.go), which
// costs a little on every read, so a Conn that never parks is better off
// without it.
func (c *Conn) AllowPark() bool {
	if c.masked {
		return false // a client's (Dial): its peer's frames are not masked
	}
	c.enablePark()
	return c.parks
}

// Park is called by the goroutine reading c, between two messages, to
// park c instead of waiting for the next one. It returns false when
// there is something to read now (or c cannot park): read it. It returns
// true when c is parked: the caller must return without reading or
// touching what the reading goroutine owns, and resume is called on a new
// goroutine once the socket is readable, the peer has hung up, or c is
// closed; it should read on (and may park again). Before parking, what
// the batch produced is flushed (Batch), as before any read that may
// wait.
func (c *Conn) Park(resume func()) bool {
	if !c.parks {
		return false
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	r := &c.reader
	if len(c.early) > 0 || r.pending != nil || !r.frames.between() {
		return false
	}
	c.takeControl()
	if len(r.ahead) > 0 {
		return false
	}
	c.batch.Flush()
	for linger := time.Duration(0); ; {
		if r.poll(c.socket, linger) {
			c.takeControl()
			if len(r.ahead) > 0 || r.pending != nil {
				return false
			}
			linger = 0
			continue
		}
		if linger > 0 {
			return c.parkSocket(resume)
		}
		linger = parkLinger
	}
}
