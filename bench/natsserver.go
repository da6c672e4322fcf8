package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// serveNATS runs an embedded nats-server with default settings until
// killed. With websocket, listen is the address of its WebSocket listener
// (no TLS, as on loopback), the one announced; its TCP listener takes a
// free port.
func serveNATS(listen string, websocket bool) error {
	_, addr, err := startNATS(listen, websocket)
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", addr)
	select {}
}

// startNATS starts nats-server in this process and returns it with the
// address its clients dial: its WebSocket listener's with websocket.
func startNATS(listen string, websocket bool) (*server.Server, string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, "", err
	}
	p, _ := strconv.Atoi(port)
	if p == 0 {
		p = server.RANDOM_PORT
	}
	opts := &server.Options{Host: host, Port: p, NoSigs: true, MaxPayload: 8 << 20}
	if websocket {
		opts.Port = server.RANDOM_PORT
		opts.Websocket = server.WebsocketOpts{Host: host, Port: p, NoTLS: true}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, "", err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, "", fmt.Errorf("nats-server not ready after 10s")
	}
	addr := ns.Addr().String()
	if websocket {
		addr = strings.TrimPrefix(ns.WebsocketURL(), "ws://")
	}
	return ns, addr, nil
}
