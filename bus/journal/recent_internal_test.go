package journal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/protocol"
)

// TestRecentMessages: the Messages page's rows are the newest messages
// first, one per message, each with the outcome its events add up to; a
// limit keeps the newest, and a query narrows them as it narrows events.
func TestRecentMessages(t *testing.T) {
	t.Parallel()
	j := testJournal(Options{})
	due := time.Now().Add(time.Minute)
	for _, ev := range []protocol.JournalEvent{
		{Kind: protocol.JournalAccepted, MessageID: "m1", Topic: "jobs:1", From: "a"},
		{Kind: protocol.JournalRouted, MessageID: "m1", Topic: "jobs:1", Chain: []string{"w"}},
		{Kind: protocol.JournalDelivery, MessageID: "m1", Topic: "jobs:1", ClientID: "w", Attempt: 1, Outcome: "not_processed"},
		{Kind: protocol.JournalAccepted, MessageID: "m2", Topic: "jobs:2", From: "a"},
		{Kind: protocol.JournalRouted, MessageID: "m2", Topic: "jobs:2", Chain: []string{"w"}},
		{Kind: protocol.JournalRetryScheduled, MessageID: "m1", Topic: "jobs:1", ClientID: "w", Attempt: 2, NextAt: due},
		{Kind: protocol.JournalDelivery, MessageID: "m2", Topic: "jobs:2", ClientID: "w", Attempt: 1, Outcome: "processed"},
		{Kind: protocol.JournalDelivery, MessageID: "m1", Topic: "jobs:1", ClientID: "w", Attempt: 2, Outcome: "rejected"},
		{Kind: protocol.JournalDeadLettered, MessageID: "m1", Topic: "jobs:1", ClientID: "w", DeadLetterID: "d-1", Reason: "rejected"},
		{Kind: protocol.JournalAccepted, MessageID: "m3", Topic: "nobody:1", From: "b"},
		{Kind: protocol.JournalRouted, MessageID: "m3", Topic: "nobody:1"},
		{Kind: protocol.JournalAccepted, MessageID: "m4", Topic: "agent:x", From: "b"},
		{Kind: protocol.JournalHeld, MessageID: "m4", Topic: "agent:x", NextAt: due},
		{Kind: protocol.JournalAccepted, MessageID: "m5", Topic: "jobs:5", From: "b"},
		{Kind: protocol.JournalRouted, MessageID: "m5", Topic: "jobs:5", Chain: []string{"w"}},
	} {
		j.record(&ev)
	}
	type row struct{ id, outcome, detail string }
	rows := func(limit int, q journalQuery) []row {
		var out []row
		for _, m := range j.recentMessages(limit, &q) {
			out = append(out, row{m.MessageID, m.Outcome, m.Detail})
		}
		return out
	}
	require.Equal(t, []row{
		{"m5", outcomePending, ""},
		{"m4", outcomeHeld, "waits for a subscriber until " + due.UTC().Format(time.RFC3339)},
		{"m3", outcomeNoSubscribers, "routed to nobody"},
		{"m2", outcomeDelivered, "processed by w"},
		{"m1", outcomeDeadLettered, "dead letter d-1 (rejected)"},
	}, rows(100, journalQuery{}))
	require.Equal(t, []row{{"m5", outcomePending, ""}, {"m4", outcomeHeld, "waits for a subscriber until " + due.UTC().Format(time.RFC3339)}}, rows(2, journalQuery{}))
	jobs, err := protocol.ParsePattern("jobs:*")
	require.NoError(t, err)
	got := j.recentMessages(100, &journalQuery{topic: jobs, kind: protocol.JournalAccepted})
	require.Len(t, got, 3)
	require.Equal(t, "m1", got[2].MessageID)
	require.Equal(t, 2, got[2].Attempts, "both attempts of m1")
	require.Equal(t, "a", got[2].From)
}
