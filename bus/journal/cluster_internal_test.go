package journal

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/protocol"
)

// TestJournalSearchAnswer checks the answering side of a cluster's
// journal search, as another node's request reaches it: the reader rules
// it carries decide what is shown, a search without rules shows nothing,
// a page with payloads is cut to what an answer carries and goes on from
// its next, and a malformed request is answered with an error naming it.
func TestJournalSearchAnswer(t *testing.T) {
	jn := New(&Options{Payloads: true})
	s, err := bus.New(&bus.Options{Logger: slog.New(slog.DiscardHandler), MaxMessageBytes: 8 << 10, Extensions: []bus.Extension{jn}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	payload := json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)
	for i := range 20 {
		topic := "jobs:a"
		if i%2 == 1 {
			topic = "secret:a"
		}
		jn.j.record(&protocol.JournalEvent{Kind: protocol.JournalAccepted, MessageID: "m", Topic: topic, Payload: payload})
	}
	ask := func(search journalSearch) journalAnswer {
		t.Helper()
		b, err := json.Marshal(search)
		require.NoError(t, err)
		var a journalAnswer
		answer, err := jn.answerSearch(t.Context(), b)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(answer, &a))
		return a
	}

	jobs := auth.ReadRules{Grants: []auth.ReadGrant{{Allow: []string{"jobs:*"}}}}
	a := ask(journalSearch{Query: "limit=1000", Reader: &jobs, HidePayloads: true})
	require.Empty(t, a.Error)
	require.Len(t, a.Page.Events, 10)
	for _, ev := range a.Page.Events {
		require.Equal(t, "jobs:a", ev.Topic)
		require.Nil(t, ev.Payload)
	}
	a = ask(journalSearch{Query: "limit=1000"})
	require.Empty(t, a.Error)
	require.Empty(t, a.Page.Events, "no rules, no events")

	var all []protocol.JournalEvent
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 20)
		a = ask(journalSearch{Query: "limit=1000&after=" + after, Everything: true})
		require.Empty(t, a.Error)
		require.NotEmpty(t, a.Page.Events)
		b, _ := json.Marshal(a)
		require.LessOrEqual(t, int64(len(b)), s.Options().MaxMessageBytes+64<<10, "an answer fits a cluster frame")
		all = append(all, a.Page.Events...)
		after = a.Page.Next
		if !a.Page.More {
			break
		}
		require.Less(t, len(a.Page.Events), 20, "cut to the answer's size")
	}
	require.Len(t, all, 20)
	require.Equal(t, string(payload), string(all[0].Payload))

	for req, want := range map[string]string{
		`{`:                                     "malformed journal search",
		`{"query":"limit=0","everything":true}`: "limit",
		`{"query":"","reader":{"grants":[{"allow":["[a-"]}]}}`: "allow pattern",
	} {
		var a journalAnswer
		answer, err := jn.answerSearch(t.Context(), []byte(req))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(answer, &a))
		require.Contains(t, a.Error, want, req)
		require.Nil(t, a.Page)
	}
}
