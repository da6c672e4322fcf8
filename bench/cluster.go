package main

import (
	"fmt"
	"log"
)

// clusterNodes is the size of the cluster the cross-node relay runs on:
// the smallest whose JetStream keeps a quorum when one node is gone.
const clusterNodes = 3

// clusterCases are the cross-node relays: the unloaded round trip, and
// the load of the relay target (1 KiB ×64).
var clusterCases = []relayCase{{1 << 10, 1}, {1 << 10, 64}}

// cluster measures what clustering costs a relay: the publisher on node a
// of a fresh three-node cluster, the subscriber on node b, so that every
// delivery goes a → b through NATS and the ack comes back the same way;
// alternating round by round with the same relay on the shared single
// bus. The cluster's server CPU is all three nodes'.
func (h *harness) cluster() error {
	nodes, err := startCluster(h.bub, h.tmp, clusterNodes)
	if err != nil {
		return err
	}
	defer stopNodes(nodes)
	systems := []system{h.systems[0], &busSystem{proc: nodes[0], sub: nodes[1], nodes: nodes}}
	for _, rc := range clusterCases {
		runs, err := h.relayRuns(systems, rc.size, rc.window)
		if err != nil {
			return fmt.Errorf("cross-node relay %s, %d in flight: %w", sizeName(rc.size), rc.window, err)
		}
		c := newCell(fmt.Sprintf("relay %s ×%d", sizeName(rc.size), rc.window), runs, higherIsBetter)
		c.Payload, c.InFlight, c.Subscribers = rc.size, rc.window, 1
		h.res.Cluster = append(h.res.Cluster, c)
		cl, one := c.Median["cluster"], c.Median["bus"]
		log.Printf("%s across nodes: %.0f/s, p50 %s, p99 %s, %.1f µs cluster CPU per relay; one node: %.0f/s, p99 %s, %.1f µs; cluster/single %.2f",
			c.Name, cl.Throughput, us(cl.P50), us(cl.P99), cl.ServerCPUPerMsg, one.Throughput, us(one.P99), one.ServerCPUPerMsg, c.ClusterVsSingle.Throughput)
	}
	return nil
}
