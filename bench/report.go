package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// results is everything one run measured; it is also the JSON written.
type results struct {
	Machine machine       `json:"machine"`
	Relay   []cell        `json:"relay,omitempty"`
	Latency []cell        `json:"latency,omitempty"`
	Fanout  []cell        `json:"fanout,omitempty"`
	SDK     []cell        `json:"sdk,omitempty"`
	Cluster []cell        `json:"cluster,omitempty"`
	Durable []cell        `json:"durable,omitempty"`
	Journal []cell        `json:"journal,omitempty"`
	Spawn   []cell        `json:"spawn,omitempty"`
	Wake    *wakeResult   `json:"wake,omitempty"`
	Idle    []idleResult  `json:"idle,omitempty"`
	Route   []routeResult `json:"route,omitempty"`
	Targets []target      `json:"targets,omitempty"`
}

// better says which way a cell's headline figure points.
type better int

const (
	higherIsBetter better = iota // throughput cells
	lowerIsBetter                // latency cells
)

// cell is one scenario measured on every system.
type cell struct {
	Name        string  `json:"name"`
	Payload     int     `json:"payload_bytes"`
	InFlight    int     `json:"in_flight,omitempty"`
	Subscribers int     `json:"subscribers"`
	Rate        float64 `json:"rate_per_sec,omitempty"`
	// Runs holds every run per system, in round order.
	Runs map[string][]stats `json:"runs"`
	// Median is the median of each figure over the rounds, per system.
	Median map[string]stats `json:"median"`
	// Vs holds the bus's figures over each baseline's, by the baseline's
	// name: the median of the ratios of runs in the same round.
	Vs map[string]ratios `json:"bus_vs,omitempty"`
	// SDKVsLean is the Go SDK's figures over the lean clients', in the
	// sdk scenario.
	SDKVsLean ratios `json:"sdk_vs_lean"`
	// ClusterVsSingle is the cross-node relay's figures over the single
	// bus's, in the cluster scenario.
	ClusterVsSingle ratios `json:"cluster_vs_single"`
	// JournalVsOff is the bus's figures with the message journal on
	// over those with it off, in the journal scenario.
	JournalVsOff ratios `json:"journal_vs_off"`
	better       better
}

// ratios compares the bus with a baseline; above 1 the bus has more
// throughput or more latency.
type ratios struct {
	Throughput float64 `json:"throughput"`
	P50        float64 `json:"p50"`
	P99        float64 `json:"p99"`
}

func newCell(name string, runs map[string][]stats, b better) cell {
	c := cell{Name: name, Runs: runs, Median: make(map[string]stats), better: b}
	for sys, rs := range runs {
		c.Median[sys] = stats{
			Messages:   int64(median(rs, func(s stats) float64 { return float64(s.Messages) })),
			Errors:     int64(median(rs, func(s stats) float64 { return float64(s.Errors) })),
			Throughput: median(rs, func(s stats) float64 { return s.Throughput }),
			Deliveries: median(rs, func(s stats) float64 { return s.Deliveries }),
			P50:        median(rs, func(s stats) float64 { return s.P50 }),
			P99:        median(rs, func(s stats) float64 { return s.P99 }),
			P999:       median(rs, func(s stats) float64 { return s.P999 }),
			Max:        median(rs, func(s stats) float64 { return s.Max }),
			ServerCPU:  median(rs, func(s stats) float64 { return s.ServerCPU }),
			Lost:       int64(median(rs, func(s stats) float64 { return float64(s.Lost) })),

			ServerCPUPerMsg:      median(rs, func(s stats) float64 { return s.ServerCPUPerMsg }),
			ClientCPUPerMsg:      median(rs, func(s stats) float64 { return s.ClientCPUPerMsg }),
			ServerSyscallsPerMsg: median(rs, func(s stats) float64 { return s.ServerSyscallsPerMsg }),
			HelperCPUPerMsg:      median(rs, func(s stats) float64 { return s.HelperCPUPerMsg }),
		}
	}
	for _, base := range baselineNames() {
		if runs["bus"] != nil && runs[base] != nil {
			if c.Vs == nil {
				c.Vs = make(map[string]ratios)
			}
			c.Vs[base] = pairRatios(runs["bus"], runs[base])
		}
	}
	c.SDKVsLean = pairRatios(runs["sdk"], runs["bus"])
	c.ClusterVsSingle = pairRatios(runs["cluster"], runs["bus"])
	return c
}

// pairRatios divides the bus's runs by the baseline's round by round and
// takes the median.
func pairRatios(bus, base []stats) ratios {
	n := min(len(bus), len(base))
	var tp, p50, p99 []float64
	for i := range n {
		tp = append(tp, div(bus[i].Throughput, base[i].Throughput))
		p50 = append(p50, div(bus[i].P50, base[i].P50))
		p99 = append(p99, div(bus[i].P99, base[i].P99))
	}
	id := func(f float64) float64 { return f }
	return ratios{Throughput: median(tp, id), P50: median(p50, id), P99: median(p99, id)}
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func median[T any](xs []T, f func(T) float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// baselineNames are the names of the systems the bus is measured
// against, in the order of the report's columns.
func baselineNames() []string {
	names := make([]string, len(baselines))
	for i, b := range baselines {
		names[i] = b.name
	}
	return names
}

// systems are the bus and the baselines c measured, in column order.
func (c cell) systems() []string {
	var out []string
	for _, sys := range append([]string{"bus"}, baselineNames()...) {
		if _, ok := c.Median[sys]; ok {
			out = append(out, sys)
		}
	}
	return out
}

// baselines are the baselines c measured, in column order.
func (c cell) baselines() []string {
	sys := c.systems()
	if len(sys) == 0 || sys[0] != "bus" {
		return sys
	}
	return sys[1:]
}

func (c cell) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-24s", c.Name)
	for _, sys := range c.systems() {
		m := c.Median[sys]
		fmt.Fprintf(&b, "  %s %8.0f/s p99 %7s %5.1fµs CPU %4.1f syscalls", sys, m.Throughput, us(m.P99), m.ServerCPUPerMsg, m.ServerSyscallsPerMsg)
	}
	if c.better == lowerIsBetter {
		b.WriteString("  p99")
	}
	for _, base := range c.baselines() {
		v := c.Vs[base].Throughput
		if c.better == lowerIsBetter {
			v = c.Vs[base].P99
		}
		fmt.Fprintf(&b, " bus/%s %.2f", base, v)
	}
	return b.String()
}

// busSummary is summary for a cell measured on the bus alone.
func (c cell) busSummary() string {
	m := c.Median["bus"]
	return fmt.Sprintf("%-32s  %8.0f/s  p50 %7s  p99 %7s  max %7s  bus CPU %.1fµs per message", c.Name, m.Throughput, us(m.P50), us(m.P99), us(m.Max), m.ServerCPUPerMsg)
}

// us formats microseconds for a table.
func us(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0fms", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fms", v/1000)
	}
	return fmt.Sprintf("%.0fµs", v)
}

func printReport(w io.Writer, r *results) {
	m := r.Machine
	fmt.Fprintf(w, "\n%s · %s, %d CPUs, %s · kernel %s · %s · commit %s · %d round(s) of %s\n",
		m.Date, m.CPU, m.CPUs, m.Memory, m.Kernel, m.Go, m.Commit, m.Rounds, m.RunFor)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(r.Relay) > 0 {
		fmt.Fprintln(w, "\nRelay (closed loop; msgs/s = acked relays per second; µs CPU = server process CPU per relay)")
		printSystemsTable(tw, r.Relay, []column{
			{"msg/s", false, func(c cell, sys string) string { return fmt.Sprintf("%.0f", c.Median[sys].Throughput) }},
			busOverRate, p50Column, p99Column, p999Column, cpuColumn,
		})
	}
	if len(r.Latency) > 0 {
		fmt.Fprintln(w, "\nLatency (open loop at a constant rate, timed from when each message was due; µs CPU per relay)")
		printSystemsTable(tw, r.Latency, []column{
			p50Column, p99Column, p999Column,
			{"p99 bus/", true, func(c cell, sys string) string { return fmt.Sprintf("%.2f", c.Vs[sys].P99) }},
			cpuColumn,
		})
	}
	if len(r.Fanout) > 0 {
		fmt.Fprintln(w, "\nFan-out (1 KiB, continueAll; latency = publish until every ack is back; µs CPU = server process CPU per delivery)")
		printSystemsTable(tw, r.Fanout, []column{
			{"deliv/s", false, func(c cell, sys string) string { return fmt.Sprintf("%.0f", c.Median[sys].Deliveries) }},
			busOverRate, p50Column, p99Column,
			{"µs CPU", false, func(c cell, sys string) string {
				return fmt.Sprintf("%.1f", c.Median[sys].ServerCPUPerMsg/float64(c.Subscribers))
			}},
		})
	}
	if len(r.SDK) > 0 {
		fmt.Fprintln(w, "\nGo SDK relay (package peer on both ends) next to the lean clients, same bus; µs CPU per relay")
		fmt.Fprintln(tw, "scenario\tsdk msg/s\tlean msg/s\tsdk/lean\tsdk p50\tsdk p99\tlean p99\tsdk bus µs CPU\tlean bus µs CPU\tsdk client µs CPU\tlean client µs CPU\t")
		for _, c := range r.SDK {
			s, l := c.Median["sdk"], c.Median["bus"]
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t\n", c.Name, s.Throughput, l.Throughput, c.SDKVsLean.Throughput,
				us(s.P50), us(s.P99), us(l.P99), s.ServerCPUPerMsg, l.ServerCPUPerMsg, s.ClientCPUPerMsg, l.ClientCPUPerMsg)
		}
		tw.Flush()
	}
	if len(r.Cluster) > 0 {
		fmt.Fprintln(w, "\nCross-node relay (publisher on node a, subscriber on node b of a 3-node cluster) next to the single bus, same rounds; µs CPU = all server processes per relay")
		fmt.Fprintln(tw, "scenario\tcluster msg/s\tsingle msg/s\tcluster/single\tcluster p50\tcluster p99\tsingle p50\tsingle p99\tcluster µs CPU\tsingle µs CPU\t")
		for _, c := range r.Cluster {
			cl, one := c.Median["cluster"], c.Median["bus"]
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t\n", c.Name, cl.Throughput, one.Throughput, c.ClusterVsSingle.Throughput,
				us(cl.P50), us(cl.P99), us(one.P50), us(one.P99), cl.ServerCPUPerMsg, one.ServerCPUPerMsg)
		}
		tw.Flush()
	}
	if alone := slices.Concat(r.Durable, r.Spawn); len(alone) > 0 {
		fmt.Fprintln(w, "\nBus alone, fresh store each run (1 KiB; latency = publish until result; woken: subscribe until delivery; spawn: first message to a new chat until bench/agent's processMessage)")
		fmt.Fprintln(tw, "scenario\tin flight\tper second\tp50\tp99\tmax\tbus µs CPU\tspawner µs CPU\t")
		for _, c := range alone {
			b := c.Median["bus"]
			helper := ""
			if b.HelperCPUPerMsg > 0 {
				helper = fmt.Sprintf("%.0f", b.HelperCPUPerMsg)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%.1f\t%s\t\n", c.Name, c.InFlight, b.Throughput, us(b.P50), us(b.P99), us(b.Max), b.ServerCPUPerMsg, helper)
		}
		tw.Flush()
	}
	if wr := r.Wake; wr != nil {
		fmt.Fprintf(w, "\nAgents that come and go (issue 23; bub spawner with examples/echo-agent; publish until the agent's reply; load average %s)\n", wr.Load)
		fmt.Fprintln(tw, "scenario\tp50\tp99\tmax\tbus µs CPU\tspawner µs CPU\t")
		for _, c := range []cell{wr.Spawn, wr.Wake} {
			b := c.Median["bus"]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f\t%.0f\t\n", c.Name, us(b.P50), us(b.P99), us(b.Max), b.ServerCPUPerMsg, b.HelperCPUPerMsg)
		}
		tw.Flush()
		fmt.Fprintf(w, "wake p50 / spawn p50: %.2f; bus memory per durable subscription of a hibernated agent: %.0f B (BenchmarkDurableAwayMemory)\n", wr.WakeOverSpawnP50, wr.AwayBytesPerSub)
		if s := wr.Scale; s != nil {
			fmt.Fprintf(w, "%d conversations at once through --max-agents %d --idle-timeout %s: %d answered in %.1f s (p50 %s, p99 %s, max %s), %d dead letters, at most %d agent processes, %d spawns (%d wakes), %d hibernations (%d for capacity) (load average %s)\n",
				s.Conversations, s.MaxAgents, s.IdleTimeout, s.Answered, s.Seconds, us(s.P50), us(s.P99), us(s.Max), s.DeadLetters, s.MaxProcesses, s.Spawns, s.Wakes, s.Hibernations, s.ForCapacity, s.Load)
		}
	}
	if len(r.Journal) > 0 {
		fmt.Fprintln(w, "\nMessage journal (bus with the journal on, the default, next to one with --journal=false, same rounds; µs CPU per relay)")
		fmt.Fprintln(tw, "scenario\ton msg/s\toff msg/s\ton/off\ton p50\ton p99\toff p50\toff p99\ton µs CPU\toff µs CPU\t")
		for _, c := range r.Journal {
			on, off := c.Median["bus"], c.Median[journalOffName]
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t\n", c.Name, on.Throughput, off.Throughput, c.JournalVsOff.Throughput,
				us(on.P50), us(on.P99), us(off.P50), us(off.P99), on.ServerCPUPerMsg, off.ServerCPUPerMsg)
		}
		tw.Flush()
	}
	if len(r.Idle) > 0 {
		fmt.Fprintln(w, "\nIdle connections (server RSS growth / connections; one subscription each)")
		fmt.Fprintln(tw, "system\tconnections\tRSS before\tRSS after\tKiB per conn\t")
		for _, i := range r.Idle {
			fmt.Fprintf(tw, "%s\t%d\t%.1f MiB\t%.1f MiB\t%.1f\t\n", i.System, i.Connections, float64(i.RSSBefore)/(1<<20), float64(i.RSSAfter)/(1<<20), i.PerConnKiB)
		}
		tw.Flush()
	}
	if len(r.Route) > 0 {
		fmt.Fprintln(w, "\nRouting (in-package BenchmarkRoute)")
		fmt.Fprintln(tw, "case\tns/op\t")
		for _, rr := range r.Route {
			fmt.Fprintf(tw, "%s\t%.1f\t\n", rr.Name, rr.NsPerOp)
		}
		tw.Flush()
	}
	if len(r.Targets) > 0 {
		fmt.Fprintln(w, "\nTargets (issue 27; routing from issue 6, the journal from issue 24, agents from issue 23)")
		fmt.Fprintln(tw, "target\tmeasured\tmet\t")
		for _, t := range r.Targets {
			met := "no"
			if t.Met {
				met = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t\n", t.Target, t.Measured, met)
		}
		tw.Flush()
	}
	printSummary(w, r)
}

// target is one of issue 27's targets (and issue 6's routing one, issue
// 24's journal one, issue 23's agent ones), judged against this run.
type target struct {
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func evaluateTargets(r *results) []target {
	var ts []target
	for _, c := range r.Relay {
		nats := c.Vs["nats"]
		switch {
		case c.Payload == 1<<10 && c.InFlight == 64:
			bus, n := c.Median["bus"].ServerCPUPerMsg, c.Median["nats"].ServerCPUPerMsg
			ts = append(ts,
				target{"relay 1 KiB ×64 ≥ 0.5× NATS", fmt.Sprintf("%.2f×", nats.Throughput), nats.Throughput >= 0.5},
				target{"relay 1 KiB ×64 bus CPU ≤ 2× NATS's", fmt.Sprintf("%.1f× (%.1f vs %.1f µs)", bus/n, bus, n), n > 0 && bus <= 2*n})
		case c.Payload == 1<<10 && c.InFlight == 1:
			ts = append(ts,
				target{"relay 1 KiB ×1 ≥ 1.0× NATS", fmt.Sprintf("%.2f×", nats.Throughput), nats.Throughput >= 1},
				target{"relay 1 KiB ×1 p99 ≤ 1.2× NATS's", fmt.Sprintf("%.2f× (%s)", nats.P99, us(c.Median["bus"].P99)), nats.P99 <= 1.2})
		}
	}
	for _, c := range r.Latency {
		if c.Payload == 1<<10 {
			ts = append(ts, target{"open-loop 1 KiB p99 ≤ 1.5× NATS's", fmt.Sprintf("%.2f×", c.Vs["nats"].P99), c.Vs["nats"].P99 <= 1.5})
		}
	}
	for _, c := range r.Fanout {
		if c.Subscribers == 1000 && c.InFlight == 1 {
			p99 := c.Median["bus"].P99
			ts = append(ts, target{"fan-out 1000 ×1, all acks p99 ≤ 30 ms", us(p99), p99 <= 30000})
		}
	}
	for _, c := range r.SDK {
		if c.Payload == 1<<10 && c.InFlight == 64 {
			ts = append(ts, target{"Go SDK relay 1 KiB ×64 ≥ 0.9× the lean clients", fmt.Sprintf("%.2f×", c.SDKVsLean.Throughput), c.SDKVsLean.Throughput >= 0.9})
		}
	}
	for _, i := range r.Idle {
		if i.System == "bus" {
			ts = append(ts, target{"idle ≤ 12 KiB per connection", fmt.Sprintf("%.1f KiB (%d conns)", i.PerConnKiB, i.Connections), i.PerConnKiB <= 12 && i.Connections > 0})
		}
	}
	var best float64
	for _, c := range r.Durable {
		if strings.HasPrefix(c.Name, "stored retries") {
			best = max(best, c.Median["bus"].Throughput)
		}
	}
	if best > 0 {
		ts = append(ts, target{"≥ 10,000 stored retries/s", fmt.Sprintf("%.0f/s", best), best >= 10000})
	}
	for _, c := range r.Journal {
		ts = append(ts, target{"journal on ≥ 0.85× off, relay 1 KiB ×64 (issue 24)", fmt.Sprintf("%.2f×", c.JournalVsOff.Throughput), c.JournalVsOff.Throughput >= 0.85})
	}
	if wr := r.Wake; wr != nil {
		ts = append(ts,
			target{"wake p50 ≤ 2× spawn p50 (issue 23)", fmt.Sprintf("%.2f× (%s vs %s)", wr.WakeOverSpawnP50, us(wr.Wake.Median["bus"].P50), us(wr.Spawn.Median["bus"].P50)), wr.WakeOverSpawnP50 > 0 && wr.WakeOverSpawnP50 <= 2},
			target{"< 1 KiB of bus memory per hibernated subscription (issue 23)", fmt.Sprintf("%.0f B", wr.AwayBytesPerSub), wr.AwayBytesPerSub > 0 && wr.AwayBytesPerSub < 1024})
		if s := wr.Scale; s != nil {
			ts = append(ts, target{fmt.Sprintf("%d conversations served with %d processes (issue 23)", s.Conversations, s.MaxAgents),
				fmt.Sprintf("%d answered in %.1f s, %d dead letters, at most %d processes", s.Answered, s.Seconds, s.DeadLetters, s.MaxProcesses), s.met()})
		}
	}
	var r10, r10k float64
	for _, rr := range r.Route {
		switch rr.Name {
		case "exact/subs=10":
			r10 = rr.NsPerOp
		case "exact/subs=10000":
			r10k = rr.NsPerOp
		}
	}
	if r10 > 0 && r10k > 0 {
		ts = append(ts, target{"match 10,000 exact ≤ 2× 10", fmt.Sprintf("%.2f× (%.0f vs %.0f ns)", r10k/r10, r10k, r10), r10k <= 2*r10})
	}
	return ts
}

// column is a figure the table shows for every system of a cell, or with
// ratio for every baseline (the bus over it), headed "SYS figure" or
// "figureSYS".
type column struct {
	figure string
	ratio  bool
	value  func(c cell, sys string) string
}

// The columns the relay, latency and fan-out tables share.
var (
	busOverRate = column{"bus/", true, func(c cell, sys string) string { return fmt.Sprintf("%.2f", c.Vs[sys].Throughput) }}
	p50Column   = column{"p50", false, func(c cell, sys string) string { return us(c.Median[sys].P50) }}
	p99Column   = column{"p99", false, func(c cell, sys string) string { return us(c.Median[sys].P99) }}
	p999Column  = column{"p99.9", false, func(c cell, sys string) string { return us(c.Median[sys].P999) }}
	cpuColumn   = column{"µs CPU", false, func(c cell, sys string) string { return fmt.Sprintf("%.1f", c.Median[sys].ServerCPUPerMsg) }}
)

// printSystemsTable writes one row per cell and, per column, one cell per
// system the first cell measured.
func printSystemsTable(tw *tabwriter.Writer, cells []cell, cols []column) {
	heads := []string{"scenario"}
	for _, col := range cols {
		for _, sys := range col.systems(cells[0]) {
			if col.ratio {
				heads = append(heads, col.figure+sys)
			} else {
				heads = append(heads, sys+" "+col.figure)
			}
		}
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t")+"\t")
	for _, c := range cells {
		row := []string{c.Name}
		for _, col := range cols {
			for _, sys := range col.systems(cells[0]) {
				row = append(row, col.value(c, sys))
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
}

func (col column) systems(c cell) []string {
	if col.ratio {
		return c.baselines()
	}
	return c.systems()
}
