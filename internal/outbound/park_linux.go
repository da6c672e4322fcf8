//go:build linux

package outbound

import (
	"os"
	"sync"
	"syscall"
)

// The poller is one epoll instance for every parked socket of the
// process, level-triggered and one-shot: a socket armed while readable
// (a request that came between Park's read and the arming) fires at
// once, and a socket fires once per Park. Go's own netpoller keeps the
// same socket in its epoll (edge-triggered), which is allowed and
// unaffected: this one only says when to start a goroutine that reads.
//
// The poller's goroutine does not block a thread in epoll_wait: the epoll
// descriptor is itself readable while sockets in it are ready, so it is
// given to Go's netpoller (os.NewFile on a non-blocking descriptor) and
// waited on like a socket, and a wake-up costs what a socket's does.
//
// epoll_ctl is only ever called through the socket's RawConn.Control,
// which holds the descriptor open meanwhile, so it never reaches a
// descriptor number closed and reused by another connection; closing a
// socket removes it from the epoll set (the kernel does, once the file
// is released), so nothing is removed by hand. A socket closed while
// parked has no event to wake it: the close itself (Conn.Close, fail)
// resumes it.

// parkState is a Conn's part in the poller, guarded by the poller's mu;
// registered and arm's fields only the goroutine parking touches, under
// the Conn's rmu.
type parkState struct {
	// id keys the Conn in the poller's set, in the event's data: 0 until
	// it first parks.
	id     uint64
	resume func()
	// closed is set once the Conn is closed: it parks no more.
	closed bool
	// registered is set once the socket is in the epoll set: the next
	// Park re-arms it (EPOLL_CTL_MOD).
	registered bool
	// armFn is arm's RawConn callback as a func value made once, and
	// armErr its result, so that parking allocates nothing.
	armFn  func(fd uintptr)
	armErr error
}

// poller is the process's epoll instance for parked sockets.
type poller struct {
	epfd int
	// raw waits for epfd to be readable, in Go's netpoller; file keeps
	// it open.
	file *os.File
	raw  syscall.RawConn
	// waitFn is wait as a func value made once.
	waitFn func(fd uintptr) bool
	events [128]syscall.EpollEvent

	// mu guards parked, nextID and every Conn's parkState but registered.
	mu sync.Mutex
	// parked are the Conns parked now, by id: whoever takes one out (an
	// event, or a close) resumes it.
	parked map[uint64]*Conn
	nextID uint64
}

var (
	pollerOnce sync.Once
	thePoller  *poller
)

// getPoller returns the process's poller, started on first use; nil if
// it cannot be made (Park then does nothing).
func getPoller() *poller {
	pollerOnce.Do(func() {
		p, err := newPoller()
		if err != nil {
			return
		}
		thePoller = p
		go p.run()
	})
	return thePoller
}

func newPoller() (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	p := &poller{epfd: epfd, file: os.NewFile(uintptr(epfd), "outbound-poller"), parked: make(map[uint64]*Conn)}
	p.raw, err = p.file.SyscallConn()
	if err != nil {
		_ = p.file.Close()
		return nil, err
	}
	p.waitFn = p.wait
	return p, nil
}

// run resumes the Conns whose sockets turn ready, for the life of the
// process.
func (p *poller) run() {
	for {
		// wait never returns true, and Read fails only once the file
		// is closed, which it never is.
		_ = p.raw.Read(p.waitFn)
	}
}

// wait is the RawConn callback of run: it takes every ready event and
// resumes its Conn, and asks to wait once none is left.
func (p *poller) wait(uintptr) bool {
	for {
		n, err := syscall.EpollWait(p.epfd, p.events[:], 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return false
		}
		for i := range p.events[:n] {
			ev := &p.events[i]
			p.take(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32)
		}
		if n < len(p.events) {
			// None left: a socket that turns ready from now on makes
			// epfd readable again, which wakes this.
			return false
		}
	}
}

// take resumes the Conn parked under id, unless a close took it first.
func (p *poller) take(id uint64) {
	p.mu.Lock()
	c := p.parked[id]
	delete(p.parked, id)
	var resume func()
	if c != nil {
		resume = c.park.resume
	}
	p.mu.Unlock()
	if resume != nil {
		go resume()
	}
}

// enablePark lets a server's Conn park, when it reads a TCP socket and
// the poller runs.
func (c *Conn) enablePark() {
	c.parks = c.reader.raw != nil && getPoller() != nil
	c.reader.bounded = c.parks
}

// parkSocket hands c's socket to the poller, unless c was closed; see
// Park.
func (c *Conn) parkSocket(resume func()) bool {
	p := thePoller
	p.mu.Lock()
	if c.park.closed {
		p.mu.Unlock()
		return false
	}
	if c.park.id == 0 {
		p.nextID++
		c.park.id = p.nextID
	}
	c.park.resume = resume
	p.parked[c.park.id] = c
	p.mu.Unlock()
	if err := c.arm(); err != nil {
		// The socket is closing. Read on (and meet the error), unless
		// the close has taken c out already and resumes it.
		p.mu.Lock()
		_, still := p.parked[c.park.id]
		delete(p.parked, c.park.id)
		p.mu.Unlock()
		return !still
	}
	return true
}

// arm adds c's socket to the epoll set, or re-arms it, for one event:
// readable, or hung up (EPOLLHUP and EPOLLERR always count).
func (c *Conn) arm() error {
	if c.park.armFn == nil {
		c.park.armFn = c.armSocket
	}
	c.park.armErr = nil
	if err := c.reader.raw.Control(c.park.armFn); err != nil {
		return err
	}
	return c.park.armErr
}

// armSocket is arm's RawConn callback.
func (c *Conn) armSocket(fd uintptr) {
	ev := syscall.EpollEvent{
		Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
		Fd:     int32(uint32(c.park.id)),
		Pad:    int32(uint32(c.park.id >> 32)),
	}
	op := syscall.EPOLL_CTL_MOD
	if !c.park.registered {
		op = syscall.EPOLL_CTL_ADD
	}
	if err := syscall.EpollCtl(thePoller.epfd, op, int(fd), &ev); err != nil {
		c.park.armErr = os.NewSyscallError("epoll_ctl", err)
		return
	}
	c.park.registered = true
}

// unpark marks c closed for parking and, if it is parked, resumes it, so
// that its reader meets the close: a closed socket leaves the epoll set
// without an event. Conn.Close and fail call it once the socket is
// closed.
func (c *Conn) unpark() {
	if !c.parks {
		return
	}
	p := thePoller
	p.mu.Lock()
	c.park.closed = true
	_, parked := p.parked[c.park.id]
	delete(p.parked, c.park.id)
	resume := c.park.resume
	p.mu.Unlock()
	if parked {
		go resume()
	}
}

// Parked returns how many Conns of the process are parked now.
func Parked() int {
	p := thePoller
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}
