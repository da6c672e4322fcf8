package outbound

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// readFrames reads n frames from r and sends their payloads on a channel.
func readFrames(t *testing.T, r *bufio.Reader, n int) <-chan string {
	got := make(chan string, n)
	go func() {
		for range n {
			_, p := readFrame(t, r)
			got <- p
		}
	}()
	return got
}

// Messages written to a held Conn wait for the batch's flush and leave
// together, in one write call, whole and in order; a control frame is not
// held back, and takes the held frames with it, ahead of itself.
func TestBatchFlushesOncePerBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, peer := pipe(t, 5*time.Second)
		r := bufio.NewReader(peer)
		var b Batch
		b.Hold(c)
		b.Hold(c) // again in the same batch: one hold
		for i := range 3 {
			require.NoError(t, c.WriteMessage(websocket.MessageText, fmt.Appendf(nil, "m%d", i)))
		}
		synctest.Wait()
		writes, frames := c.Stats()
		require.Equal(t, uint64(0), writes, "a held message was written before the flush")
		require.Equal(t, uint64(3), frames)

		got := readFrames(t, r, 3)
		b.Flush()
		for i := range 3 {
			require.Equal(t, fmt.Sprint("m", i), <-got)
		}
		writes, _ = c.Stats()
		require.Equal(t, uint64(1), writes, "the batch left in one write call")
		// The flush's writer may still be on its way out after the
		// frames were read; were it not, it could take the frame held
		// next on its own (1 run in 100 under -race saw three writes).
		synctest.Wait()

		// Held again: a pong goes out at once, after what waits.
		b.Hold(c)
		require.NoError(t, c.WriteMessage(websocket.MessageText, []byte("before")))
		got = readFrames(t, r, 2)
		_, err := c.Write([]byte{0x8a, 1, 'x'})
		require.NoError(t, err)
		require.Equal(t, "before", <-got)
		require.Equal(t, "x", <-got)
		b.Flush()
		writes, _ = c.Stats()
		require.Equal(t, uint64(2), writes)
	})
}

// A held Conn whose queue would pass maxQueued writes: the held frames
// first, then the one that did not fit, so the holder never waits on
// itself and order holds.
func TestBatchFullQueueWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, peer := pipe(t, 5*time.Second)
		r := bufio.NewReader(peer)
		var b Batch
		b.Hold(c)
		require.NoError(t, c.WriteMessage(websocket.MessageText, []byte("small")))
		big := strings.Repeat("b", maxQueued)
		got := readFrames(t, r, 2)
		require.NoError(t, c.WriteMessage(websocket.MessageText, []byte(big)))
		require.Equal(t, "small", <-got)
		require.Equal(t, big, <-got)
		b.Flush()
		synctest.Wait()
		writes, frames := c.Stats()
		require.Equal(t, uint64(1), writes)
		require.Equal(t, uint64(2), frames)
	})
}

// A reader's batch is flushed before it reads from the socket: what it
// held while handling the last read leaves before it waits for more.
func TestBatchFlushedBeforeRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, readerPeer := pipe(t, 5*time.Second)
		dest, destPeer := pipe(t, 5*time.Second)
		reader.Batch().Hold(dest)
		require.NoError(t, dest.WriteMessage(websocket.MessageText, []byte("answer")))
		got := readFrames(t, bufio.NewReader(destPeer), 1)
		read := make(chan error, 1)
		go func() {
			_, err := reader.Read(make([]byte, 1))
			read <- err
		}()
		require.Equal(t, "answer", <-got, "the held message did not leave before the read")
		_, err := readerPeer.Write([]byte{1})
		require.NoError(t, err)
		require.NoError(t, <-read)
	})
}

// Holds nest: a Conn held by two batches is written once both flushed.
func TestBatchHoldsNest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, peer := pipe(t, 5*time.Second)
		var a, b Batch
		a.Hold(c)
		b.Hold(c)
		require.NoError(t, c.WriteMessage(websocket.MessageText, []byte("m")))
		a.Flush()
		synctest.Wait()
		writes, _ := c.Stats()
		require.Equal(t, uint64(0), writes, "written while another batch held the Conn")
		got := readFrames(t, bufio.NewReader(peer), 1)
		b.Flush()
		require.Equal(t, "m", <-got)
	})
}

// Releasing a held Conn whose peer does not read never waits on that
// peer (the releaser is another connection's read loop): what the socket
// does not take at once is written by a goroutine of the Conn's, in
// order, once the peer reads.
func TestBatchReleaseDoesNotWaitOnPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			accepted <- nc
		}
	}()
	peer, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer peer.Close()
	require.NoError(t, peer.(*net.TCPConn).SetReadBuffer(32<<10))
	server := <-accepted
	require.NoError(t, server.(*net.TCPConn).SetWriteBuffer(32<<10))
	c := newConn(server, 10*time.Second)
	defer c.Close()

	var b Batch
	b.Hold(c)
	// 240 KB: more than the small socket buffers take at once, less than
	// the queue's bound.
	const frames = 120
	payload := strings.Repeat("p", 2000)
	for i := range frames {
		require.NoError(t, c.WriteMessage(websocket.MessageText, fmt.Appendf(nil, "%03d%s", i, payload)))
	}
	flushed := make(chan struct{})
	go func() {
		b.Flush()
		close(flushed)
	}()
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("Flush waited for a peer that does not read")
	}
	r := bufio.NewReader(peer)
	for i := range frames {
		_, p := readFrame(t, r)
		require.Equal(t, fmt.Sprintf("%03d%s", i, payload), p)
	}
	writes, _ := c.Stats()
	require.GreaterOrEqual(t, writes, uint64(2), "the socket took the whole batch at once: the test proves nothing")
}

// A release writes through the socket whatever deadline an earlier write
// left on it: a connection that wrote only through releases for longer
// than its write timeout was failed with an i/o timeout, though every
// write had gone at once (a subscriber under steady load was dropped
// after 10 s).
func TestBatchReleaseAfterAnOldDeadline(t *testing.T) {
	c, peer := tcpPair(t)
	c.timeout = 10 * time.Second
	// What the last blocking write leaves once its time is up.
	require.NoError(t, c.Conn.SetWriteDeadline(time.Now().Add(-time.Second)))
	var b Batch
	b.Hold(c)
	require.NoError(t, c.WriteMessage(websocket.MessageText, []byte("late")))
	b.Flush()
	_, p := readFrame(t, peer)
	require.Equal(t, "late", p)
	require.NoError(t, c.failure())
}
