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

// TestWakeTargets checks how issue 23's targets are judged: wake p50
// within 2× of spawn p50, under 1 KiB per hibernated subscription, and
// every conversation answered, none dead-lettered, with no more agent
// processes than --max-agents.
func TestWakeTargets(t *testing.T) {
	scale := func(answered, dead, procs int) *scaleResult {
		return &scaleResult{Conversations: 1000, MaxAgents: 16, Answered: answered, DeadLetters: dead, MaxProcesses: procs}
	}
	tests := []struct {
		name      string
		ratio     float64
		bytes     float64
		scale     *scaleResult
		wantMet   []bool // wake, memory, scale
		wantCount int
	}{
		{"all met", 1.5, 955, scale(1000, 0, 16), []bool{true, true, true}, 3},
		{"slow wake", 2.1, 955, scale(1000, 0, 16), []bool{false, true, true}, 3},
		{"no ratio", 0, 955, nil, []bool{false, true}, 2},
		{"1 KiB is not under", 2, 1024, scale(999, 0, 16), []bool{true, false, false}, 3},
		{"a dead letter", 1, 900, scale(1000, 1, 16), []bool{true, true, false}, 3},
		{"a process too many", 1, 900, scale(1000, 0, 17), []bool{true, true, false}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &results{Wake: &wakeResult{WakeOverSpawnP50: tt.ratio, AwayBytesPerSub: tt.bytes, Scale: tt.scale}}
			ts := evaluateTargets(r)
			require.Len(t, ts, tt.wantCount)
			for i, want := range tt.wantMet {
				require.Equal(t, want, ts[i].Met, "%s: %s", ts[i].Target, ts[i].Measured)
			}
			var b strings.Builder
			printReport(&b, r)
			require.Contains(t, b.String(), "wake p50 / spawn p50")
		})
	}
}
