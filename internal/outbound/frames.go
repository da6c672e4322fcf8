package outbound

import (
	"context"
	"encoding/binary"
	"math"
)

// Reading no further than the frame under way
//
// A Conn parks between messages (Park) only when nothing it has read
// waits in a buffer above the socket: not in the batch reader's, which it
// sees, and not in coder/websocket's bufio.Reader, which it cannot see
// (and which another goroutine's close handshake may be reading). So a
// Conn that parks hands coder/websocket no byte past the end of the frame
// it is reading: a bufio.Reader asks for more only once it is empty and
// its reader needs more, so when coder/websocket has read a whole
// message its bufio.Reader is empty, and what the peer sent after the
// message is still in the batch reader, where Park finds it. A batch of
// pipelined frames still costs one read call from the socket; only the
// hand-outs to the bufio.Reader, copies from memory, are one per frame.

// maxClientHeader is the longest frame header: 2 bytes, an extended
// length of 8 and a masking key of 4.
const maxClientHeader = 14

// frameCursor follows the frame boundaries in the bytes handed out.
type frameCursor struct {
	// header has the first n bytes of the header being handed out.
	header [maxClientHeader]byte
	n      uint8
	// left is what of the current frame's payload is not handed out.
	left int64
	// limit, when > 0, is the largest data frame payload the reader
	// takes (SetReadLimit); tooBig is set once a header declares more.
	limit  int64
	tooBig bool
}

// take returns how many bytes at the start of b may be handed out: all
// of them, or up to the end of the frame they are part of. It counts
// them as handed out. It returns at least 1 for a non-empty b.
func (f *frameCursor) take(b []byte) int {
	i := 0
	if f.left == 0 {
		for {
			if i == len(b) {
				return i
			}
			f.header[f.n] = b[i]
			f.n++
			i++
			if int(f.n) == headerLen(f.header[:f.n]) {
				break
			}
		}
		f.left = payloadLen(f.header[:f.n])
		f.tooBig = f.tooBig || f.over(f.header[0], f.left)
		f.n = 0
	}
	k := min(int64(len(b)-i), f.left)
	f.left -= k
	return i + int(k)
}

// over reports whether a frame whose header begins with b0 and declares
// a payload of n bytes is larger than the limit. Control frames are
// coder/websocket's to refuse (they carry 125 bytes at most). A
// compressed frame (RSV1) may be a little larger than the message it
// inflates to, when the message does not compress: it is given a 64th
// more, and 64 KiB, of room.
func (f *frameCursor) over(b0 byte, n int64) bool {
	if f.limit <= 0 || b0&0x08 != 0 {
		return false
	}
	limit := f.limit
	if b0&0x40 != 0 {
		limit += limit/64 + 64<<10
	}
	return n > limit
}

// between reports whether the bytes handed out end at a frame boundary.
func (f *frameCursor) between() bool { return f.n == 0 && f.left == 0 }

// headerLen returns the length of the frame header h begins, once h has
// its first two bytes; 2 before.
func headerLen(h []byte) int {
	if len(h) < 2 {
		return 2
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4 // masking key
	}
	return n
}

// payloadLen returns the payload length the whole header h declares. A
// length with the top bit set, which RFC 6455 forbids and coder/websocket
// refuses, counts as the largest: the connection fails on it anyway.
func payloadLen(h []byte) int64 {
	switch n := h[1] & 0x7f; n {
	case 126:
		return int64(binary.BigEndian.Uint16(h[2:]))
	case 127:
		return int64(min(binary.BigEndian.Uint64(h[2:]), math.MaxInt64))
	default:
		return int64(n)
	}
}

// WebSocket opcodes Park answers itself (RFC 6455, section 5.2).
const opPong = 0xA

// takeControl handles the pings and pongs at the start of what the Conn
// has read ahead, as coder/websocket would, and drops them: a pong to the
// keepalive's ping (or a ping) wakes a parked Conn, and handled by
// coder/websocket it would leave the goroutine waiting inside
// coder/websocket's read for the next message, which is what parking
// avoids. Only whole, final, masked frames are taken; anything else (a
// frame cut short, a close, data) stays for coder/websocket, whose checks
// decide. Only while reading is locked, at a frame boundary.
func (c *Conn) takeControl() {
	r := &c.reader
	for len(r.ahead) >= 6 {
		b := r.ahead
		op := b[0] & 0x0f
		n := int(b[1] & 0x7f)
		if b[0]&0xf0 != 0x80 || b[1]&0x80 == 0 || n > 125 || len(b) < 6+n ||
			!(op == opPong || op == opPing && c.onPing == nil) {
			return
		}
		payload := b[6 : 6+n]
		for i := range payload {
			payload[i] ^= b[2+i%4]
		}
		if op == opPong {
			c.awaitingPong.Store(false)
			if c.onPong != nil {
				c.onPong(context.Background(), payload)
			}
		} else {
			// As coder/websocket answers a ping: a pong with its payload.
			// The write is left to a goroutine when the socket is free,
			// so a peer that does not read cannot hold this one; after
			// our close frame none is due, and an error means the Conn
			// has failed, which the next read reports.
			var h [2]byte
			_ = c.write(header(h[:0], opPong, n), payload, true, true)
		}
		r.ahead = b[6+n:]
	}
	if len(r.ahead) == 0 {
		r.release()
	}
}
