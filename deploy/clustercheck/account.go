package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
)

// ledger records both ends of the load: the ids the bus accepted, per
// load message (seq), and every delivery the subscriber got. Safe for
// concurrent use.
type ledger struct {
	mu sync.Mutex
	// accepted maps each messageId the bus acknowledged to the publisher
	// to its load message.
	accepted map[string]int
	// answers describe the bus's answer for each accepted id, to show
	// for any id that vanishes.
	answers map[string]string
	// delivered counts the deliveries of each messageId; seqOf gives the
	// load message of an id the subscriber saw, accepted or not (a
	// publish whose answer was lost is delivered under an id the
	// publisher never learnt).
	delivered map[string]int
	seqOf     map[string]int
}

func newLedger() *ledger {
	return &ledger{accepted: map[string]int{}, answers: map[string]string{}, delivered: map[string]int{}, seqOf: map[string]int{}}
}

// accept records that the bus acknowledged load message seq as id,
// with answer describing how.
func (l *ledger) accept(id string, seq int, answer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accepted[id] = seq
	l.answers[id] = answer
}

// deliver records one delivery of id, carrying load message seq.
func (l *ledger) deliver(id string, seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delivered[id]++
	l.seqOf[id] = seq
}

// deliveredIDs counts the ids delivered at least once.
func (l *ledger) deliveredIDs() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.delivered)
}

// missing returns the accepted ids not delivered (yet).
func (l *ledger) missing() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id := range l.accepted {
		if l.delivered[id] == 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// account is the final reckoning of a run.
type account struct {
	Messages    int            `json:"messages"`     // load messages meant to be published
	Accepted    int            `json:"accepted_ids"` // ids the bus acknowledged
	Unpublished []int          `json:"unpublished"`  // load messages the bus never accepted
	Delivered   int            `json:"delivered_ids"`
	DeadByWhy   map[string]int `json:"dead_lettered"` // reason → accepted ids dead-lettered, not delivered
	Vanished    []string       `json:"vanished"`      // accepted, neither delivered nor dead-lettered: "ID (seq N, the bus's answer)"
	// Redeliveries are deliveries of an id beyond its first: a delivery
	// whose ack was lost (its node died) and that the bus retried.
	Redeliveries int `json:"redeliveries"`
	RedeliverIDs int `json:"redelivered_ids"`
	// Republished are load messages delivered under more than one id:
	// the publisher sent again after losing the bus's answer to a
	// publish the bus had in fact accepted.
	Republished int `json:"republished"`
	// Unacknowledged are ids delivered that the publisher never learnt
	// (their answer was lost), counted for the record.
	Unacknowledged int `json:"unacknowledged_ids"`

	// Publishes and Redials say how much of the trouble the clients met.
	Publishes publishTally `json:"publishes"`
	Redials   int          `json:"redials"`
}

// publishTally counts what the publishers' attempts were answered with.
type publishTally struct {
	Held       int64 `json:"held"`       // accepted, held for a subscriber
	Retrying   int64 `json:"retrying"`   // accepted, a delivery to be retried
	Refused    int64 `json:"refused"`    // an error from the bus; sent again
	Unanswered int64 `json:"unanswered"` // no answer (node gone, timeout); sent again
}

// ok reports whether every load message was accepted and every accepted
// id is accounted for.
func (a *account) ok() bool { return len(a.Vanished) == 0 && len(a.Unpublished) == 0 }

// reckon accounts for messages load messages (seq 1..messages) given the
// dead letters found, by messageId, with their reasons.
func (l *ledger) reckon(messages int, dead map[string]string) *account {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := &account{Messages: messages, Accepted: len(l.accepted), DeadByWhy: map[string]int{}}
	published := map[int]bool{}
	for id, seq := range l.accepted {
		published[seq] = true
		switch n := l.delivered[id]; {
		case n > 0:
			a.Delivered++
		case dead[id] != "":
			a.DeadByWhy[dead[id]]++
		default:
			a.Vanished = append(a.Vanished, fmt.Sprintf("%s (seq %d, answered %s)", id, seq, l.answers[id]))
		}
	}
	for seq := 1; seq <= messages; seq++ {
		if !published[seq] {
			a.Unpublished = append(a.Unpublished, seq)
		}
	}
	idsOfSeq := map[int]int{}
	for id, n := range l.delivered {
		if n > 1 {
			a.Redeliveries += n - 1
			a.RedeliverIDs++
		}
		if _, ok := l.accepted[id]; !ok {
			a.Unacknowledged++
		}
		idsOfSeq[l.seqOf[id]]++
	}
	for _, n := range idsOfSeq {
		if n > 1 {
			a.Republished++
		}
	}
	slices.Sort(a.Vanished)
	return a
}

// print writes the account for a person.
func (a *account) print(w io.Writer) {
	dead := 0
	var why []string
	for _, reason := range slices.Sorted(maps.Keys(a.DeadByWhy)) {
		dead += a.DeadByWhy[reason]
		why = append(why, fmt.Sprintf("%s %d", reason, a.DeadByWhy[reason]))
	}
	fmt.Fprintf(w, "clustercheck: %d load messages, %d accepted ids; %d never accepted\n", a.Messages, a.Accepted, len(a.Unpublished))
	fmt.Fprintf(w, "clustercheck: accepted ids: %d delivered, %d dead-lettered (%s), %d vanished\n", a.Delivered, dead, strings.Join(why, ", "), len(a.Vanished))
	fmt.Fprintf(w, "clustercheck: duplicates: %d redeliveries of %d ids (an ack lost with its node, retried); %d messages delivered under two ids (published again after a lost answer; %d ids delivered whose answer the publisher never got)\n",
		a.Redeliveries, a.RedeliverIDs, a.Republished, a.Unacknowledged)
	fmt.Fprintf(w, "clustercheck: publishes: %d accepted as held, %d as retrying; attempts refused %d, unanswered %d; fresh connections after a silent node %d\n",
		a.Publishes.Held, a.Publishes.Retrying, a.Publishes.Refused, a.Publishes.Unanswered, a.Redials)
	if len(a.Vanished) > 0 {
		for _, v := range a.Vanished {
			fmt.Fprintf(w, "clustercheck: vanished: %s\n", v)
		}
	}
	if len(a.Unpublished) > 0 {
		fmt.Fprintf(w, "clustercheck: never accepted: %d load messages, first seq %d\n", len(a.Unpublished), a.Unpublished[0])
	}
}
