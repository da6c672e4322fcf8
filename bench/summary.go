package main

import (
	"fmt"
	"io"
	"strings"
)

// summaryHeadings are the summary's systems and their headings, in column
// order.
var summaryHeadings = map[string]string{"bus": "bus", "raw": "raw", "nats": "NATS", "nats-ws": "NATS ws", "centrifuge": "Centrifuge"}

// summaryRow is one row of the summary: per system its figure, the bus's
// ratio over each baseline, and each server's CPU per message.
type summaryRow struct {
	name  string
	value map[string]string
	ratio map[string]float64
	cpu   map[string]float64
}

// printSummary writes the headline figures as one Markdown table, the
// "Current" table of docs/BENCHMARKS.md: per row the bus and every
// baseline where they apply, the bus's ratios over them, and each server's
// CPU per message.
func printSummary(w io.Writer, r *results) {
	var rows []summaryRow
	// busOnly is a row the bus alone has.
	busOnly := func(name, value string, cpu float64) {
		rows = append(rows, summaryRow{name: name, value: map[string]string{"bus": value}, cpu: map[string]float64{"bus": cpu}})
	}
	// each is a row of every system c measured.
	each := func(c cell, name string, value func(sys string, s stats) string, ratio func(ratios) float64, per float64) {
		row := summaryRow{name: name, value: map[string]string{}, ratio: map[string]float64{}, cpu: map[string]float64{}}
		for _, sys := range c.systems() {
			row.value[sys] = value(sys, c.Median[sys])
			row.cpu[sys] = c.Median[sys].ServerCPUPerMsg / per
		}
		for _, base := range c.baselines() {
			row.ratio[base] = ratio(c.Vs[base])
		}
		rows = append(rows, row)
	}
	rate := func(s stats) string { return fmt.Sprintf("%s/s", thousands(s.Throughput)) }
	for _, c := range r.Relay {
		if c.Payload == 1<<10 && (c.InFlight == 1 || c.InFlight == 64) || c.Payload == 64<<10 && c.InFlight == 64 {
			each(c, c.Name, func(sys string, s stats) string {
				if sys == "bus" && c.InFlight == 1 {
					return rate(s) + ", p99 " + us(s.P99)
				}
				return rate(s)
			}, func(r ratios) float64 { return r.Throughput }, 1)
		}
	}
	for _, c := range r.Latency {
		if c.Payload == 1<<10 {
			each(c, "latency 1 KiB open loop (p99)", func(_ string, s stats) string { return us(s.P99) },
				func(r ratios) float64 { return r.P99 }, 1)
		}
	}
	for _, c := range r.Fanout {
		if c.Subscribers == 1000 && c.InFlight == 1 {
			each(c, c.Name+" (p99, all acks)", func(_ string, s stats) string { return us(s.P99) },
				func(r ratios) float64 { return r.P99 }, float64(c.Subscribers))
		}
	}
	for _, c := range r.SDK {
		if c.Payload == 1<<10 && c.InFlight == 64 {
			s := c.Median["sdk"]
			busOnly("Go SDK "+c.Name+fmt.Sprintf(" (%.2f× the lean clients)", c.SDKVsLean.Throughput), rate(s), s.ServerCPUPerMsg)
		}
	}
	for _, c := range r.Cluster {
		cl := c.Median["cluster"]
		v := rate(cl)
		if c.InFlight == 1 {
			v += ", p99 " + us(cl.P99)
		}
		busOnly("cross-node "+c.Name+fmt.Sprintf(" (%.2f× one node)", c.ClusterVsSingle.Throughput), v, cl.ServerCPUPerMsg)
	}
	for _, c := range r.Durable {
		if c.InFlight != 1 {
			busOnly(c.Name, rate(c.Median["bus"]), c.Median["bus"].ServerCPUPerMsg)
		}
	}
	for _, c := range r.Journal {
		on := c.Median["bus"]
		busOnly(c.Name+fmt.Sprintf(" (%.2f× off)", c.JournalVsOff.Throughput), rate(on), on.ServerCPUPerMsg)
	}
	for _, c := range r.Spawn {
		b := c.Median["bus"]
		busOnly(c.Name, fmt.Sprintf("p50 %s, max %s", us(b.P50), us(b.Max)), b.ServerCPUPerMsg)
	}
	if wr := r.Wake; wr != nil {
		for _, c := range []cell{wr.Spawn, wr.Wake} {
			b := c.Median["bus"]
			busOnly(c.Name, fmt.Sprintf("p50 %s, p99 %s", us(b.P50), us(b.P99)), b.ServerCPUPerMsg)
		}
		if s := wr.Scale; s != nil {
			busOnly(fmt.Sprintf("%d conversations, --max-agents %d", s.Conversations, s.MaxAgents), fmt.Sprintf("%.1f s, p50 %s, p99 %s", s.Seconds, us(s.P50), us(s.P99)), 0)
		}
	}
	if len(r.Idle) > 0 {
		row := summaryRow{name: fmt.Sprintf("idle connection (%d)", r.Idle[0].Connections), value: map[string]string{}}
		for _, i := range r.Idle {
			row.value[i.System] = fmt.Sprintf("%.1f KiB", i.PerConnKiB)
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return
	}
	systems := append([]string{"bus"}, baselineNames()...)
	heads := []string{"scenario"}
	for _, sys := range systems {
		heads = append(heads, summaryHeadings[sys])
	}
	for _, base := range baselineNames() {
		heads = append(heads, "bus/"+summaryHeadings[base])
	}
	for _, sys := range systems {
		heads = append(heads, summaryHeadings[sys]+" CPU")
	}
	fmt.Fprintln(w, "\nSummary (Markdown; ratios of the p99 for latency and fan-out; CPU in µs of each server process per message, per delivery for the fan-out)")
	fmt.Fprintln(w, "| "+strings.Join(heads, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(heads)))
	for _, row := range rows {
		cells := []string{row.name}
		for _, sys := range systems {
			cells = append(cells, row.value[sys])
		}
		for _, base := range baselineNames() {
			c := ""
			if v, ok := row.ratio[base]; ok {
				c = fmt.Sprintf("%.2f", v)
			}
			cells = append(cells, c)
		}
		for _, sys := range systems {
			c := ""
			if v := row.cpu[sys]; v > 0 {
				c = fmt.Sprintf("%.1f", v)
			}
			cells = append(cells, c)
		}
		fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
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
