package outbound

import (
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// tcpPair returns a Conn over one end of a loopback TCP connection, and
// the other end.
func tcpPair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	client, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	server := <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { client.Close(); server.Close() })
	return newConn(server, 0), client
}

// Bytes the peer sent before the reader came take one read call however
// many small reads hand them out, and the batch's buffer goes back to the
// pool once drained, so an idle connection holds none.
func TestReadTakesTheBatchInOneCall(t *testing.T) {
	c, peer := tcpPair(t)
	sent := bytes.Repeat([]byte("0123456789abcdef"), 2048) // 32 KiB
	_, err := peer.Write(sent)
	require.NoError(t, err)

	var got []byte
	p := make([]byte, 4096)
	for len(got) < len(sent) {
		n, err := c.Read(p)
		require.NoError(t, err)
		got = append(got, p[:n]...)
	}
	require.Equal(t, sent, got)
	require.Nil(t, c.reader.buf, "a drained batch gives its buffer back")
	require.Nil(t, c.reader.ahead)
}

// A read as large as a batch goes straight into the caller's buffer, and
// the peer's close ends reading with io.EOF.
func TestReadLargeAndEOF(t *testing.T) {
	c, peer := tcpPair(t)
	sent := bytes.Repeat([]byte{'x'}, 3*readAheadSize)
	go func() {
		_, _ = peer.Write(sent)
		_ = peer.Close()
	}()
	p := make([]byte, readAheadSize)
	var got []byte
	var err error
	for err == nil {
		var n int
		n, err = c.Read(p)
		got = append(got, p[:n]...)
	}
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, got, len(sent))
	require.Nil(t, c.reader.buf)
}

// A Read waiting for data holds no buffer, and closing the Conn ends it.
func TestReadWaitsWithoutBuffer(t *testing.T) {
	c, _ := tcpPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 16))
		done <- err
	}()
	require.NoError(t, c.Close())
	require.ErrorIs(t, <-done, net.ErrClosed)
	require.Nil(t, c.reader.buf)
}
