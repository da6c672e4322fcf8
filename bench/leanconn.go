package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/internal/outbound"
)

// leanConn is a lean client's connection: coder/websocket reads and
// closes it, and every message goes out through outbound's batching
// writer, as the bus's and the Go SDK's do, so that the clients batch
// their pipelined frames as the servers they measure do.
type leanConn struct {
	*websocket.Conn
	out *outbound.Conn
}

// leanWriteTimeout bounds each write call, as the bus's default
// Options.WriteTimeout does.
const leanWriteTimeout = 10 * time.Second

// leanSources is how many loopback source addresses the lean clients
// dial from, 127.0.0.1 and up: one address has about 28,000 ephemeral
// ports towards one server (net.ipv4.ip_local_port_range), and the idle
// scenario may open 100,000 connections and more.
const leanSources = 8

// leanClients dial from one source address each; leanNext picks the next.
var (
	leanClients = func() (cs [leanSources]*http.Client) {
		for i := range cs {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i))}}
			cs[i] = &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
		}
		return cs
	}()
	leanNext atomic.Uint64
)

// leanDial connects to url, a loopback address, from the next of the
// loopback source addresses.
func leanDial(ctx context.Context, url string) (*leanConn, error) {
	i := leanNext.Add(1) % leanSources
	ws, out, _, err := outbound.Dial(ctx, url, &websocket.DialOptions{HTTPClient: leanClients[i]}, leanWriteTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w (from 127.0.0.%d)", err, 1+i)
	}
	return &leanConn{Conn: ws, out: out}, nil
}

// Write writes one message through the batching writer, whose own
// timeout bounds it; ctx is not used.
func (c *leanConn) Write(_ context.Context, typ websocket.MessageType, p []byte) error {
	return c.out.WriteMessage(typ, p)
}

// answer writes the answer to a message just read, from the reading
// goroutine: while more of what was read in waits, the write is left to
// the writer, so the answers to one batch leave in one write call.
func (c *leanConn) answer(typ websocket.MessageType, p []byte) error {
	if c.out.Buffered() > 0 {
		return c.out.WriteMessageMore(typ, p)
	}
	return c.out.WriteMessage(typ, p)
}

// publish writes a publisher's message as nats.go publishes: the write is
// left to the connection's writer goroutine whenever the socket is free,
// so that the messages the publisher sends while it runs (each answer
// frees a slot of the window, and answers come in batches) join it in
// one write call.
func (c *leanConn) publish(typ websocket.MessageType, p []byte) error {
	return c.out.WriteMessageMore(typ, p)
}
