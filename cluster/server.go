package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startServer starts the embedded nats-server a node runs with
// ClusterListen/Routes, and returns it with its log and the number of
// nodes the configuration names (this one and its distinct routes). It
// returns as soon as the server listens, fails at once when a listener
// cannot bind, and gives up when ctx ends.
func startServer(ctx context.Context, o *Options, log *slog.Logger) (*server.Server, *serverLog, int, error) {
	so := &server.Options{
		ServerName: o.NodeID,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		// The bus owns the process: signals are its to handle.
		NoSigs: true,
		// Records and deliveries carry the bus's largest message whole.
		MaxPayload: int32(o.maxPayload()),
		// Every failed route connection reaches serverLog, which
		// summarizes them; nats-server would report one attempt an hour
		// at start, and every attempt after a route was lost.
		ConnectErrorReports:   1,
		ReconnectErrorReports: 1,
	}
	// The server always listens for clients, even when nobody but this
	// node (connected in-process) uses it: with DontListen, nats-server
	// 2.15 never starts routing (Server.Start only opens the route
	// accept loop once the client listener is up).
	clientListen := o.ClientListen
	if clientListen == "" {
		clientListen = "127.0.0.1:0"
	}
	host, port, err := splitListen(clientListen)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("client listen address: %w", err)
	}
	so.Host, so.Port = host, port
	// Without routes the server runs JetStream standalone: a clustered
	// JetStream sizes its quorum from the routes, and with none would
	// wait for a second server for ever.
	nodes := 1
	if len(o.Routes) > 0 {
		listen := o.ClusterListen
		if listen == "" {
			listen = "0.0.0.0:0"
		}
		host, port, err := splitListen(listen)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("cluster listen address: %w", err)
		}
		so.Cluster = server.ClusterOpts{Name: o.Name, Host: host, Port: port}
	}
	for _, r := range o.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" {
			return nil, nil, 0, fmt.Errorf("route %q: want nats://host:port", r)
		}
		so.Routes = append(so.Routes, u)
		if !sameAddress(u.Host, o.ClusterListen) {
			nodes++
		}
	}

	s, err := server.NewServer(so)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("embedded NATS server: %w", err)
	}
	sl := newServerLog(log.With("component", "nats-server"), so.Routes)
	s.SetLoggerV2(sl, false, false, false)
	s.Start()
	// Readiness covers the listeners (client, cluster); JetStream's
	// leader election is awaited by the caller through the client.
	if err := awaitListeners(ctx, s, sl, o); err != nil {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, nil, 0, err
	}
	return s, sl, nodes, nil
}

// awaitListeners waits until s listens for clients and routes. A
// listener that cannot bind is a fatal error nats-server only logs (it
// then runs without it, and JetStream waits for routes for ever): that
// error, naming the address, ends the wait at once.
func awaitListeners(ctx context.Context, s *server.Server, sl *serverLog, o *Options) error {
	for !s.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-sl.fatal:
			listener := "its client listen address"
			if strings.Contains(msg, "router port") {
				listener = "its cluster listen address " + o.ClusterListen
			}
			return fmt.Errorf("embedded NATS server cannot listen on %s: %s", listener, msg)
		case <-ctx.Done():
			return fmt.Errorf("embedded NATS server not listening yet (cluster listen %q): %w", o.ClusterListen, context.Cause(ctx))
		default:
		}
	}
	return nil
}

// splitListen parses host:port; port 0 asks for a free port.
func splitListen(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", addr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// sameAddress reports whether a route's host:port is literally this
// node's cluster listen address: a route to itself is legal (NATS ignores
// it) and must not count as another node. Only literal equality counts,
// since nodes on different hosts commonly share a port and a wildcard
// listen host.
func sameAddress(route, listen string) bool {
	rh, rp, err1 := net.SplitHostPort(route)
	lh, lp, err2 := net.SplitHostPort(listen)
	return err1 == nil && err2 == nil && rh == lh && rp == lp
}
