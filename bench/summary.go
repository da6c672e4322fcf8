package main

import (
	"fmt"
	"io"
	"strings"
)

// printSummary writes the headline figures as one Markdown table, the
// "Current" table of docs/BENCHMARKS.md: per row the bus, the raw relay
// and NATS where they apply, their ratios, and each server's CPU per
// message.
func printSummary(w io.Writer, r *results) {
	var rows []string
	row := func(name, bus, raw, nats, vsRaw, vsNATS string, cpu ...float64) {
		cells := []string{name, bus, raw, nats, vsRaw, vsNATS}
		for i := range 3 {
			c := ""
			if i < len(cpu) && cpu[i] > 0 {
				c = fmt.Sprintf("%.1f", cpu[i])
			}
			cells = append(cells, c)
		}
		rows = append(rows, "| "+strings.Join(cells, " | ")+" |")
	}
	rate := func(s stats) string { return fmt.Sprintf("%s/s", thousands(s.Throughput)) }
	ratio := func(f float64) string { return fmt.Sprintf("%.2f", f) }
	for _, c := range r.Relay {
		if c.Payload == 1<<10 && (c.InFlight == 1 || c.InFlight == 64) || c.Payload == 64<<10 && c.InFlight == 64 {
			b, x, n := c.Median["bus"], c.Median["raw"], c.Median["nats"]
			bus := rate(b)
			if c.InFlight == 1 {
				bus += ", p99 " + us(b.P99)
			}
			row(c.Name, bus, rate(x), rate(n), ratio(c.VsRaw.Throughput), ratio(c.VsNATS.Throughput), b.ServerCPUPerMsg, x.ServerCPUPerMsg, n.ServerCPUPerMsg)
		}
	}
	for _, c := range r.Fanout {
		if c.Subscribers == 1000 && c.InFlight == 1 {
			b, x, n := c.Median["bus"], c.Median["raw"], c.Median["nats"]
			per := float64(c.Subscribers)
			row(c.Name+" (p99, all acks)", us(b.P99), us(x.P99), us(n.P99), ratio(c.VsRaw.P99), ratio(c.VsNATS.P99), b.ServerCPUPerMsg/per, x.ServerCPUPerMsg/per, n.ServerCPUPerMsg/per)
		}
	}
	for _, c := range r.SDK {
		if c.Payload == 1<<10 && c.InFlight == 64 {
			s := c.Median["sdk"]
			row("Go SDK "+c.Name+fmt.Sprintf(" (%.2f× the lean clients)", c.SDKVsLean.Throughput), rate(s), "", "", "", "", s.ServerCPUPerMsg)
		}
	}
	for _, c := range r.Cluster {
		cl := c.Median["cluster"]
		bus := rate(cl)
		if c.InFlight == 1 {
			bus += ", p99 " + us(cl.P99)
		}
		row("cross-node "+c.Name+fmt.Sprintf(" (%.2f× one node)", c.ClusterVsSingle.Throughput), bus, "", "", "", "", cl.ServerCPUPerMsg)
	}
	for _, c := range r.Durable {
		if c.InFlight != 1 {
			row(c.Name, rate(c.Median["bus"]), "", "", "", "", c.Median["bus"].ServerCPUPerMsg)
		}
	}
	for _, c := range r.Journal {
		on := c.Median["bus"]
		row(c.Name+fmt.Sprintf(" (%.2f× off)", c.JournalVsOff.Throughput), rate(on), "", "", "", "", on.ServerCPUPerMsg)
	}
	for _, c := range r.Spawn {
		b := c.Median["bus"]
		row(c.Name, fmt.Sprintf("p50 %s, max %s", us(b.P50), us(b.Max)), "", "", "", "", b.ServerCPUPerMsg)
	}
	if len(r.Idle) > 0 {
		kib := map[string]string{}
		for _, i := range r.Idle {
			kib[i.System] = fmt.Sprintf("%.1f KiB", i.PerConnKiB)
		}
		row(fmt.Sprintf("idle connection (%d)", r.Idle[0].Connections), kib["bus"], kib["raw"], kib["nats"], "", "")
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nSummary (Markdown; ratios of the p99 for the fan-out; CPU in µs of each server process per message, per delivery for the fan-out)")
	fmt.Fprintln(w, "| scenario | bus | raw | NATS | bus/raw | bus/NATS | bus CPU | raw CPU | NATS CPU |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, l := range rows {
		fmt.Fprintln(w, l)
	}
}

// thousands formats a rate with thousands separators, as the docs do.
func thousands(f float64) string {
	s := fmt.Sprintf("%.0f", f)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
