package bustest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bub-bus/bub/bus"
)

// pipeNetwork is an in-memory network for one bus: its listener hands
// the bus one end of a net.Pipe per dial, the dialer gets the other.
// Inside a testing/synctest bubble nothing on it waits on the kernel,
// so every goroutine of the bus and its clients blocks durably and the
// bubble's clock jumps to the next timer: a retry due in an hour comes
// at once, and a test proves that nothing happened by letting fake time
// pass (synctest.Wait) instead of sleeping. Loopback sockets cannot do
// this: a goroutine waiting in a socket read is not durably blocked.
type pipeNetwork struct {
	host   string
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// pipes maps the host of an in-memory bus's URL to its network, for
// DialWS.
var pipes sync.Map

// pipeCount numbers the in-memory buses of the process, so that each has
// a host name of its own.
var pipeCount atomic.Int64

func newPipeNetwork() *pipeNetwork {
	n := &pipeNetwork{
		host:   fmt.Sprintf("pipe-%d.bustest", pipeCount.Add(1)),
		conns:  make(chan net.Conn),
		closed: make(chan struct{}),
	}
	pipes.Store(n.host, n)
	return n
}

// Accept returns the bus's end of the next dial.
func (n *pipeNetwork) Accept() (net.Conn, error) {
	select {
	case c := <-n.conns:
		return c, nil
	case <-n.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; dials fail from then on.
func (n *pipeNetwork) Close() error {
	n.once.Do(func() {
		close(n.closed)
		pipes.Delete(n.host)
	})
	return nil
}

// Addr is the network's address, which is also every pipe end's.
func (n *pipeNetwork) Addr() net.Addr { return pipeAddr(n.host) }

// dial connects a new client end to the bus.
func (n *pipeNetwork) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case n.conns <- &pipeConn{Conn: server, host: n.host}:
		return &pipeConn{Conn: client, host: n.host}, nil
	case <-n.closed:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	return nil, fmt.Errorf("dial %s: in-memory bus stopped", n.host)
}

// pipeConn is a pipe end whose addresses name its network, so that the
// bus's Host check (the Host header must be the address it was reached
// on) and its per-address limits see one address, as loopback would.
type pipeConn struct {
	net.Conn
	host string
}

func (c *pipeConn) LocalAddr() net.Addr  { return pipeAddr(c.host) }
func (c *pipeConn) RemoteAddr() net.Addr { return pipeAddr(c.host) }

// pipeAddr is the address of an in-memory network.
type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

// httpClient returns the HTTP client that dials url's in-memory bus, or
// nil when url names no such bus.
func httpClient(url string) *http.Client {
	host, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(url, "ws://"), "http://"), "/")
	v, ok := pipes.Load(host)
	if !ok {
		return nil
	}
	n := v.(*pipeNetwork)
	return &http.Client{Transport: &http.Transport{DialContext: n.dial, DisableKeepAlives: true}}
}

// StartInMemory is Start over an in-memory network instead of loopback
// TCP: for a test that runs inside a testing/synctest bubble (call it
// there), where the bus's timers (retries, holds, delivery timeouts,
// keepalives) follow the bubble's fake clock. Dial, DialToken and DialWS
// reach it through URL as they reach a bus on loopback; Server.HTTP is
// nil.
func StartInMemory(t testing.TB, opts *bus.Options) *Server {
	t.Helper()
	o := testOptions(opts)
	n := newPipeNetwork()
	srv, err := bus.New(extended(&o))
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	hs := &http.Server{}
	srv.ConfigureHTTP(hs)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(srv.Listener(n, nil))
	}()
	s := &Server{Server: srv, Store: o.Store, URL: "ws://" + n.host + "/"}
	s.stopServing = func() {
		_ = hs.Close()
		n.Close()
		<-served
	}
	t.Cleanup(func() { s.Stop(Timeout) })
	return s
}
