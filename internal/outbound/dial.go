package outbound

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/coder/websocket"
)

// Dial is websocket.Dial with the client's connection wrapped in a Conn,
// so a client's messages batch as a server's do: messages written while
// another is on its way leave together in one write call, and reads take
// what the server sent in one call (read.go). Its data frames are masked
// with a fresh key each, as RFC 6455 section 5.3 requires of a client;
// coder/websocket still does the handshake, all reading, and its own
// control frames. Compression is refused, as by Accept.
//
// opts.HTTPClient, when set, must use an *http.Transport (or none): its
// TLS settings and dialer are kept, the connection it dials is wrapped.
func Dial(ctx context.Context, url string, opts *websocket.DialOptions, timeout time.Duration) (*websocket.Conn, *Conn, *http.Response, error) {
	var o websocket.DialOptions
	if opts != nil {
		o = *opts
	}
	o.CompressionMode = websocket.CompressionDisabled
	base := http.DefaultTransport.(*http.Transport)
	client := &http.Client{}
	if o.HTTPClient != nil {
		*client = *o.HTTPClient
		if client.Transport != nil {
			t, ok := client.Transport.(*http.Transport)
			if !ok {
				return nil, nil, nil, fmt.Errorf("outbound: dial %s: the HTTP client's transport is a %T, not an *http.Transport", url, client.Transport)
			}
			base = t
		}
	}
	t := base.Clone()
	var conn *Conn
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conn = newClientConn(nc, timeout)
		return conn, nil
	}
	// TLS goes under the Conn, so that what the Conn writes are whole
	// frames inside TLS records, not records it would take for frames.
	tlsConfig := t.TLSClientConfig
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := tlsConfig.Clone()
		if cfg == nil {
			cfg = &tls.Config{}
		}
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg.ServerName = host
		}
		// HTTP/1.1 only: the upgrade needs it.
		cfg.NextProtos = nil
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		conn = newClientConn(tc, timeout)
		return conn, nil
	}
	client.Transport = t
	o.HTTPClient = client
	ws, resp, err := websocket.Dial(ctx, url, &o)
	if err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		return nil, nil, resp, err
	}
	conn.handshaking.Store(false)
	return ws, conn, resp, nil
}

func newClientConn(nc net.Conn, timeout time.Duration) *Conn {
	c := newConn(nc, timeout)
	c.masked = true
	c.handshaking.Store(true)
	return c
}

// writeMasked writes p as one masked message of opcode op, its header
// built in h: the payload is masked into a pooled buffer, since the
// caller's bytes must stay as they are.
func (c *Conn) writeMasked(h []byte, op byte, p []byte, async bool) error {
	var key [4]byte
	binary.LittleEndian.PutUint32(key[:], rand.Uint32())
	h = header(h, op, len(p))
	h[1] |= 0x80
	h = append(h, key[:]...)
	b := appendMasked(getBuffer(), p, key)
	err := c.write(h, b, false, async)
	putBuffer(b)
	return err
}

// appendMasked appends p masked with key (RFC 6455 section 5.3) to dst,
// in one pass over p: masked as it is copied.
func appendMasked(dst, p []byte, key [4]byte) []byte {
	start := len(dst)
	dst = slices.Grow(dst, len(p))[:start+len(p)]
	b := dst[start:]
	k := uint64(binary.LittleEndian.Uint32(key[:]))
	k |= k << 32
	i := 0
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(p[i:])^k)
	}
	for ; i < len(p); i++ {
		b[i] = p[i] ^ key[i&3]
	}
	return dst
}
