package outbound

import (
	"encoding/binary"
	"testing"
)

// clientFrame is one masked frame.
func clientFrame(op byte, fin bool, payload string) []byte {
	b := header(nil, op, len(payload))
	if !fin {
		b[0] &^= 0x80
	}
	b[1] |= 0x80
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	return appendMasked(append(b, key[:]...), []byte(payload), key)
}

// WebSocket opcodes of the test's frames.
const (
	opContinuation = 0x0
	opText         = 0x1
)

// frameEnds returns where each whole frame of stream ends, as RFC 6455
// lays frames out.
func frameEnds(stream []byte) []int {
	var ends []int
	at := 0
	for {
		if len(stream)-at < 2 {
			return ends
		}
		h := stream[at:]
		n := headerLen(h[:2])
		if len(h) < n {
			return ends
		}
		if payloadLen(h[:n]) > int64(len(h)-n) {
			return ends
		}
		at += n + int(payloadLen(h[:n]))
		ends = append(ends, at)
	}
}

// The cursor's hand-outs, however the stream is cut into reads and
// however large the reader's buffer, never run past a frame's end and
// stop at every one.
func FuzzFrameCursor(f *testing.F) {
	f.Add(append(clientFrame(opText, true, "hello"), clientFrame(opPing, true, "")...), uint8(3), uint8(7))
	f.Add([]byte{0x81, 0xfe, 0x01, 0x00}, uint8(1), uint8(1))
	f.Add(append([]byte{0x82, 0x7f, 0, 0, 0, 0, 0, 0, 0, 20}, make([]byte, 30)...), uint8(4), uint8(200))
	f.Add([]byte{0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5}, uint8(2), uint8(9))
	f.Fuzz(func(t *testing.T, stream []byte, chunk, want uint8) {
		ends := frameEnds(stream)
		var cur frameCursor
		at, next := 0, 0
		for at < len(stream) {
			// One read of the socket, handed out to reads of want bytes.
			read := stream[at:min(len(stream), at+int(chunk)+1)]
			for len(read) > 0 {
				n := cur.take(read[:min(len(read), int(want)+1)])
				if n < 1 || n > len(read) {
					t.Fatalf("take handed out %d of %d bytes", n, len(read))
				}
				at += n
				read = read[n:]
				if next < len(ends) && ends[next] < at {
					t.Fatalf("a hand-out ending at %d ran past the frame ending at %d", at, ends[next])
				}
				if next < len(ends) && ends[next] == at {
					next++
					if !cur.between() {
						t.Fatalf("at the end of a frame, at %d, the cursor is not between frames", at)
					}
				}
			}
		}
	})
}

// TestFrameCursorLimit checks that a data frame declaring more than the
// limit is marked too big once its header is taken, whatever follows,
// that control frames are left to coder/websocket, and that a
// compressed frame is given room to be a little larger than its message.
func TestFrameCursorLimit(t *testing.T) {
	t.Parallel()
	frame := func(b0 byte, n uint64) []byte {
		h := []byte{b0, 0x80 | 127}
		h = binary.BigEndian.AppendUint64(h, n)
		return append(h, 1, 2, 3, 4)
	}
	for _, tt := range []struct {
		name   string
		header []byte
		tooBig bool
	}{
		{"text at the limit", frame(0x81, 1000), false},
		{"text over", frame(0x81, 1001), true},
		{"2^62 bytes", frame(0x82, 1<<62), true},
		{"continuation over", frame(0x80, 1001), true},
		{"compressed, a little over", frame(0xC1, 1100), false},
		{"compressed, far over", frame(0xC1, 1<<20), true},
		{"ping", []byte{0x89, 0x80, 1, 2, 3, 4}, false},
	} {
		f := frameCursor{limit: 1000}
		// Taken a byte at a time: the verdict comes with the header's
		// last byte.
		for i := range tt.header {
			f.take(tt.header[i : i+1])
			if f.tooBig && i < len(tt.header)-1 {
				t.Errorf("%s: too big before its header was whole (byte %d)", tt.name, i)
			}
		}
		if f.tooBig != tt.tooBig {
			t.Errorf("%s: tooBig %v, want %v", tt.name, f.tooBig, tt.tooBig)
		}
	}
}
