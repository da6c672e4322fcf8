package main

import (
	"fmt"
	"log"
)

// The journal scenario measures what the message journal (issue 24)
// costs the relay: 1 KiB at 64 in flight on a bus with the journal on,
// as bub serve runs by default, next to one started with
// --journal=false, in alternating rounds. Each runs alone, so neither
// journal's memory weighs on the other.

// journalOffName names the bus without a journal in the runs.
const journalOffName = "journal_off"

// journalCase is the relay measured.
var journalCase = relayCase{1 << 10, 64}

func (h *harness) journal() error {
	on, err := startBub(h.bub, h.tmp)
	if err != nil {
		return err
	}
	defer on.stop()
	off, err := startBub(h.bub, h.tmp, "--journal=false")
	if err != nil {
		return err
	}
	defer off.stop()
	systems := []system{&busSystem{proc: on}, &busSystem{proc: off, label: journalOffName}}
	runs, err := h.relayRuns(systems, journalCase.size, journalCase.window)
	if err != nil {
		return fmt.Errorf("journal relay: %w", err)
	}
	c := newCell(fmt.Sprintf("relay %s ×%d, journal on vs off", sizeName(journalCase.size), journalCase.window), runs, higherIsBetter)
	c.Payload, c.InFlight, c.Subscribers = journalCase.size, journalCase.window, 1
	c.JournalVsOff = pairRatios(runs["bus"], runs[journalOffName])
	h.res.Journal = append(h.res.Journal, c)
	with, without := c.Median["bus"], c.Median[journalOffName]
	log.Printf("%s: on %.0f/s p99 %s %.1f µs CPU; off %.0f/s p99 %s %.1f µs CPU; on/off %.2f",
		c.Name, with.Throughput, us(with.P99), with.ServerCPUPerMsg, without.Throughput, us(without.P99), without.ServerCPUPerMsg, c.JournalVsOff.Throughput)
	return nil
}
