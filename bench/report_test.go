package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSummaryHasEveryBaseline checks that one summary row carries every
// system a cell measured: its figure, the bus's ratio over it and its CPU
// per message, in the columns the heading names.
func TestSummaryHasEveryBaseline(t *testing.T) {
	run := func(tp, cpu float64) []stats { return []stats{{Throughput: tp, ServerCPUPerMsg: cpu}} }
	c := newCell("relay 1 KiB ×64", map[string][]stats{
		"bus": run(1000, 80), "raw": run(2000, 40), "nats": run(4000, 7), "nats-ws": run(2500, 12), "centrifuge": run(500, 120),
	}, higherIsBetter)
	c.Payload, c.InFlight, c.Subscribers = 1<<10, 64, 1
	require.InDelta(t, 2.0, c.Vs["centrifuge"].Throughput, 1e-9)
	require.InDelta(t, 0.4, c.Vs["nats-ws"].Throughput, 1e-9)

	var b strings.Builder
	printSummary(&b, &results{Relay: []cell{c}, Idle: []idleResult{{System: "centrifuge", Connections: 10, PerConnKiB: 11.5}}})
	var lines []string
	for l := range strings.Lines(b.String()) {
		if strings.HasPrefix(l, "|") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	require.Len(t, lines, 4, "heading, rule, the relay row and the idle row:\n%s", b.String())
	require.Equal(t, "| scenario | bus | raw | NATS | NATS ws | Centrifuge | bus/raw | bus/NATS | bus/NATS ws | bus/Centrifuge | bus CPU | raw CPU | NATS CPU | NATS ws CPU | Centrifuge CPU |", lines[0])
	require.Equal(t, "| relay 1 KiB ×64 | 1,000/s | 2,000/s | 4,000/s | 2,500/s | 500/s | 0.50 | 0.25 | 0.40 | 2.00 | 80.0 | 40.0 | 7.0 | 12.0 | 120.0 |", lines[2])
	require.Equal(t, "| idle connection (10) |  |  |  |  | 11.5 KiB |  |  |  |  |  |  |  |  |  |", lines[3])
}

// TestSystemsTableSkipsAbsentSystems checks that a cell without some
// baselines gets no columns for them.
func TestSystemsTableSkipsAbsentSystems(t *testing.T) {
	c := newCell("fan-out 1000 ×1", map[string][]stats{
		"bus": {{Deliveries: 9000, P99: 30000}}, "centrifuge": {{Deliveries: 3000, P99: 60000}},
	}, lowerIsBetter)
	c.Subscribers = 1000
	var b strings.Builder
	printReport(&b, &results{Fanout: []cell{c}})
	require.Contains(t, b.String(), "bus/centrifuge")
	require.NotContains(t, b.String(), "bus/nats")
	require.Contains(t, c.summary(), "p99 bus/centrifuge 0.50")
}

// TestBaselineNamesMatchSystems checks that the report's column for each
// baseline is the one its runs are filed under.
func TestBaselineNamesMatchSystems(t *testing.T) {
	for _, b := range baselines {
		require.Equal(t, b.name, b.system(&process{name: b.role}).name(), "baseline of role %s", b.role)
	}
}
