package bus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/bub-bus/bub/bus/store"
)

// TestHoldOrder: the messages held for one owner are delivered oldest
// first: in id order among one node's (its ids grow as it holds them,
// whatever their publication times), and the nodes' runs merged by
// publication time.
func TestHoldOrder(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1_700_000_000+int64(s), 0) }
	tests := []struct {
		name string
		in   []*store.Pending
		want []string
	}{
		{"one node: by id, shorter first", []*store.Pending{
			{ID: "p-10", Message: store.Message{PublishedAt: at(1)}},
			{ID: "p-9", Message: store.Message{PublishedAt: at(2)}},
			{ID: "p-11", Message: store.Message{PublishedAt: at(0)}},
		}, []string{"p-9", "p-10", "p-11"}},
		{"two nodes: runs merged by publication", []*store.Pending{
			{ID: "p-b-2", Message: store.Message{PublishedAt: at(3)}},
			{ID: "p-a-7", Message: store.Message{PublishedAt: at(2)}},
			{ID: "p-b-1", Message: store.Message{PublishedAt: at(1)}},
			{ID: "p-a-6", Message: store.Message{PublishedAt: at(0)}},
			{ID: "p-c-1", Message: store.Message{PublishedAt: at(5)}},
		}, []string{"p-a-6", "p-b-1", "p-a-7", "p-b-2", "p-c-1"}},
		{"a node's run keeps its order against an older message of another", []*store.Pending{
			// b's second was published before a's, but after b's first:
			// b's order stands.
			{ID: "p-b-1", Message: store.Message{PublishedAt: at(4)}},
			{ID: "p-b-2", Message: store.Message{PublishedAt: at(1)}},
			{ID: "p-a-1", Message: store.Message{PublishedAt: at(2)}},
		}, []string{"p-a-1", "p-b-1", "p-b-2"}},
		{"held in memory only (no id) with stored ones", []*store.Pending{
			{ID: "p-a-1", Message: store.Message{PublishedAt: at(2)}},
			{ID: "", Message: store.Message{PublishedAt: at(1)}},
		}, []string{"", "p-a-1"}},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			holdOrder(tt.in)
			var got []string
			for _, p := range tt.in {
				got = append(got, p.ID)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}
