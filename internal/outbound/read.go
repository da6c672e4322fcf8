package outbound

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Reading in batches
//
// coder/websocket reads through a 4 KiB bufio.Reader, so a peer that
// pipelines 64 requests of 1 KiB costs the bus 16 read calls or more. A
// larger bufio.Reader would cut that, but every idle connection would
// hold it. batchReader instead reads the socket into a large buffer
// borrowed from a pool only once the socket is readable (the read is made
// from syscall.RawConn's callback, which the netpoller runs when data is
// there), hands its bytes out to the bufio.Reader above it, and returns
// the buffer as soon as it is drained: one read call takes everything
// the peer has sent, up to readAheadSize, and an idle connection holds no
// buffer of its own (the bufio.Reader's 512 bytes aside). A Conn that
// parks (park.go) also hands out no byte past the frame under way
// (frames.go).

// readAheadSize is the most one read call takes from the socket: 64
// pipelined requests of 1 KiB, with their frame headers.
const readAheadSize = 64 << 10

// readAheadPool holds read-ahead buffers between batches, as *[]byte.
var readAheadPool = sync.Pool{New: func() any { b := make([]byte, readAheadSize); return &b }}

// batchReader reads a TCP socket in batches; see above. Without a socket
// (raw nil) the Conn reads as it is.
type batchReader struct {
	raw syscall.RawConn
	// buf is the borrowed buffer, nil while none is; ahead is the part of
	// it not handed out yet.
	buf   *[]byte
	ahead []byte
	// readFn is fill as a func value made once, and n and err its
	// results, so that a read allocates nothing. With polling set, fill
	// does not ask to wait when nothing is there: it sets again.
	readFn  func(fd uintptr) bool
	n       int
	err     error
	polling bool
	again   bool
	// pending is the error a poll met (Park), which the next read
	// returns: the end of the stream is coder/websocket's to see.
	pending error
	// bounded is set on a Conn that parks: frames follows what is handed
	// out, which stops at the end of each frame (frames.go).
	bounded bool
	frames  frameCursor
}

func (r *batchReader) init(socket *net.TCPConn) {
	if socket == nil {
		return
	}
	raw, err := socket.SyscallConn()
	if err != nil {
		return
	}
	r.raw = raw
	r.readFn = r.fill
}

// read hands out buffered bytes, or reads the socket once: into p when p
// is as large as a batch (a large message's payload, which the
// bufio.Reader reads straight into the message), else into a borrowed
// buffer.
func (r *batchReader) read(p []byte) (int, error) {
	if len(r.ahead) > 0 {
		n := r.handOut(p, r.ahead)
		r.ahead = r.ahead[n:]
		if len(r.ahead) == 0 {
			r.release()
		}
		return n, nil
	}
	if r.pending != nil {
		return 0, r.pending
	}
	if len(p) >= readAheadSize && (!r.bounded || r.frames.left > 0) {
		if r.bounded {
			// Within a payload, so that the read takes nothing past it.
			p = p[:min(int64(len(p)), r.frames.left)]
		}
		n, err := r.readInto(p)
		if r.bounded {
			r.frames.take(p[:n])
		}
		return n, err
	}
	r.n, r.err = 0, nil
	if err := r.raw.Read(r.readFn); err != nil {
		r.release()
		return 0, err
	}
	if r.err != nil {
		r.release()
		return 0, r.err
	}
	if r.n == 0 {
		r.release()
		return 0, io.EOF
	}
	r.ahead = (*r.buf)[:r.n]
	return r.read(p)
}

// handOut copies into p what of from may be handed out now, and returns
// how much that was.
func (r *batchReader) handOut(p, from []byte) int {
	n := min(len(p), len(from))
	if r.bounded {
		n = r.frames.take(from[:n])
	}
	return copy(p, from[:n])
}

// poll reads what the socket has into a borrowed buffer: what it has now
// (linger zero), or what comes within linger. It reports whether
// something came, or the stream ended (then pending is set).
func (r *batchReader) poll(socket *net.TCPConn, linger time.Duration) bool {
	r.n, r.err, r.again = 0, nil, false
	r.polling = linger == 0
	if linger > 0 {
		if err := socket.SetReadDeadline(time.Now().Add(linger)); err != nil {
			r.pending = err
			return true
		}
	}
	err := r.raw.Read(r.readFn)
	r.polling = false
	if linger > 0 {
		// Cleared, or coder/websocket's next read would meet it.
		_ = socket.SetReadDeadline(time.Time{})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
	}
	switch {
	case err != nil:
		r.release()
		r.pending = err
	case r.err != nil:
		r.release()
		r.pending = r.err
	case r.again:
		return false
	case r.n == 0:
		r.release()
		r.pending = io.EOF
	default:
		r.ahead = (*r.buf)[:r.n]
	}
	return true
}

// fill is the RawConn callback: it borrows a buffer and reads into it,
// and gives the buffer back and asks to wait when nothing is there yet
// (unless polling).
func (r *batchReader) fill(fd uintptr) bool {
	if r.buf == nil {
		r.buf = readAheadPool.Get().(*[]byte)
	}
	for {
		n, err := syscall.Read(int(fd), *r.buf)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			r.release()
			r.again = true
			return r.polling
		case err != nil:
			r.err = os.NewSyscallError("read", err)
		default:
			r.n = n
		}
		// Called again once the socket was readable: again is history.
		r.again = false
		return true
	}
}

// readInto reads the socket straight into p.
func (r *batchReader) readInto(p []byte) (int, error) {
	var n int
	var rerr error
	err := r.raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), p)
			if rerr == syscall.EINTR {
				continue
			}
			return rerr != syscall.EAGAIN
		}
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, os.NewSyscallError("read", rerr)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// release gives the borrowed buffer back.
func (r *batchReader) release() {
	if r.buf != nil {
		readAheadPool.Put(r.buf)
		r.buf, r.ahead = nil, nil
	}
}

// ErrFrameTooBig is what Read returns once a frame header declared a
// payload larger than the read limit (SetReadLimit): the peer is refused
// as soon as the header is read, not once as many bytes came, which a
// peer that declares 2^62 bytes and sends none would never make happen.
var ErrFrameTooBig = errors.New("outbound: a frame header declares more bytes than the read limit")

// SetReadLimit makes Read fail with ErrFrameTooBig once a data frame's
// header declares a payload of more than n bytes (0: no limit). It
// applies to a Conn that parks (AllowPark), which follows the frames it
// hands out; on any other the reader above it (coder/websocket's limit)
// counts the bytes as they come. Call it before the first Read.
func (c *Conn) SetReadLimit(n int64) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.reader.frames.limit = n
}
