package main

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// serveNATS runs an embedded nats-server with default settings until
// killed.
func serveNATS(listen string) error {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return err
	}
	p, _ := strconv.Atoi(port)
	if p == 0 {
		p = server.RANDOM_PORT
	}
	ns, err := server.NewServer(&server.Options{Host: host, Port: p, NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		return err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("nats-server not ready after 10s")
	}
	fmt.Printf("listening %s\n", ns.Addr())
	select {}
}
