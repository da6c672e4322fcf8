package bus

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A connection costs a file descriptor from accept on, whatever it goes
// on to send, so the connection limits count it from accept: a peer that
// never completes its HTTP request, or keeps an HTTP connection idle
// after a health check, holds a place as a WebSocket peer does. Listener
// counts and ConfigureHTTP bounds how long a connection may stay short of
// a WebSocket; a bus served without them counts at the upgrade only.

// maxRefusing bounds the refused connections being answered at once;
// beyond it a refused connection is closed without an answer, so that a
// flood of refusals holds no more sockets than that.
const maxRefusing = 64

// refuseLinger bounds how long a refused connection is kept to answer
// it: reading the request's head, and writing the 503.
const refuseLinger = time.Second

// maxRefusedHead bounds what is read of a refused connection's request.
const maxRefusedHead = 16 << 10

// Listener returns l with every accepted connection counted against
// MaxConnections and MaxConnectionsPerAddr until it is closed, whatever
// it turns into: a WebSocket peer, an HTTP request, or nothing. A
// connection beyond a limit never reaches the HTTP server: it is answered
// HTTP 503 with a body naming the limit and closed. With tlsConfig set,
// the listener serves TLS over the counted connections, and a refused
// one is closed without an answer (answering would cost a handshake).
// Serve it with an http.Server set up by ConfigureHTTP.
func (s *Server) Listener(l net.Listener, tlsConfig *tls.Config) net.Listener {
	var counted net.Listener = &countingListener{Listener: l, s: s, tls: tlsConfig != nil}
	if tlsConfig != nil {
		return tls.NewListener(counted, tlsConfig)
	}
	return counted
}

// ConfigureHTTP sets up hs to serve s: Handler (if nil), and the time a
// connection may take short of a WebSocket, the handshake timeout in
// force now, for each of ReadHeaderTimeout, ReadTimeout (the request's
// body, and so the whole request) and IdleTimeout (between requests on
// a kept-alive connection), where they are zero. It also lets the
// WebSocket upgrade know a connection Listener counted already, so it is
// not counted twice. The HTTP timeouts are copied once: a later SetLimits
// does not change them, as hs may be serving already.
func (s *Server) ConfigureHTTP(hs *http.Server) {
	if hs.Handler == nil {
		hs.Handler = s
	}
	d := s.limits().HandshakeTimeout
	if d > 0 {
		for _, t := range []*time.Duration{&hs.ReadHeaderTimeout, &hs.ReadTimeout, &hs.IdleTimeout} {
			if *t == 0 {
				*t = d
			}
		}
	}
	next := hs.ConnContext
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if next != nil {
			ctx = next(ctx, c)
		}
		if tc, ok := c.(*tls.Conn); ok {
			c = tc.NetConn()
		}
		if cc, ok := c.(*countedConn); ok {
			ctx = context.WithValue(ctx, countedKey{}, cc)
		}
		return ctx
	}
}

// countedKey is the request context key of a connection Listener counted.
type countedKey struct{}

// countingListener is the listener Listener returns.
type countingListener struct {
	net.Listener
	s *Server
	// tls is set when TLS is served above: a refusal is not answered.
	tls bool
	// refusing counts the refused connections being answered.
	refusing atomic.Int32
}

// Accept returns the next connection within the limits, and answers the
// others itself.
func (l *countingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		release, limit, bound := l.s.limitState.admit(l.s.limits(), remoteIP(c.RemoteAddr().String()))
		if release != nil {
			return &countedConn{Conn: c, release: release}, nil
		}
		l.s.limitState.refusedConnection(limit, bound, c.RemoteAddr().String())
		l.refuse(c, limit, bound)
	}
}

// refuse answers a connection beyond a limit and closes it, off the
// accept loop; a TLS listener's is closed at once.
func (l *countingListener) refuse(c net.Conn, limit string, bound int) {
	if l.refusing.Add(1) > maxRefusing || l.tls {
		l.refusing.Add(-1)
		_ = c.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseLinger))
		// The answer waits for the request's head: an HTTP client drops
		// a response that comes before it asked.
		if _, err := http.ReadRequest(bufio.NewReader(io.LimitReader(c, maxRefusedHead))); err != nil {
			return
		}
		body := refusalBody(limit, bound)
		_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}()
}

// refusalBody is the text that says a connection was refused by limit.
func refusalBody(limit string, bound int) string {
	return fmt.Sprintf("bub-bus: limit reached: %s %d; try again later\n", limit, bound)
}

// countedConn is a connection Listener counted; closing it gives its
// place back. The WebSocket that takes it over (internal/outbound)
// writes to the socket under it (Unwrap).
type countedConn struct {
	net.Conn
	release func()
}

// Close closes the connection and gives its place back.
func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// Unwrap returns the connection Listener accepted.
func (c *countedConn) Unwrap() net.Conn { return c.Conn }

// admit counts a connection from addr against the connection limits and
// returns the release to call, once, when it ends; or nil and the limit
// it would break.
func (st *limitState) admit(l *Limits, addr string) (release func(), limit string, bound int) {
	st.mu.Lock()
	switch {
	case !under(st.conns, l.MaxConnections):
		limit, bound = limitConnections, l.MaxConnections
	case !under(st.byAddr[addr], l.MaxConnectionsPerAddr):
		limit, bound = limitConnectionsPerAddr, l.MaxConnectionsPerAddr
	default:
		st.conns++
		st.byAddr[addr]++
	}
	st.mu.Unlock()
	if limit != "" {
		st.refused[limit].Inc()
		return nil, limit, bound
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			st.mu.Lock()
			st.conns--
			if st.byAddr[addr]--; st.byAddr[addr] <= 0 {
				delete(st.byAddr, addr)
			}
			st.mu.Unlock()
		})
	}, "", 0
}

// refuseUpgradeBody is the answer to an upgrade request with a body.
const refuseUpgradeBody = "bub-bus: a WebSocket upgrade request carries no body"
