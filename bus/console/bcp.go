package console

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/httpjson"
	"github.com/bub-bus/bub/protocol"
)

// The BCP page's channel budgets and recent validation failures and
// anomalies, from the events the BCP gateway publishes on system:bcp.*
// (bcp/gateway/events.go, docs/BCP.md "Events for operators"), as this
// node routes them: kept in memory, bounded, like the agents.

const (
	// maxConsoleChannels bounds the channels remembered; beyond it the
	// one heard of longest ago is forgotten.
	maxConsoleChannels = 10000
	// maxConsoleBCPEvents is how many validation failures and anomalies
	// are kept, the newest.
	maxConsoleBCPEvents = 200
	// maxBCPField bounds each string of an event: its publisher is
	// trusted with system:bcp.*, but a string of a megabyte in 10,000
	// channels would still be memory nobody asked for.
	maxBCPField = 256
	// maxBCPKinds bounds the anomaly kinds of one event.
	maxBCPKinds = 8
)

// consoleBudget is a channel's account, as its last bcp_channel_budget
// said: the gateway's event, its strings clipped, under the protocol's
// names, so that the console's script reads what the gateway writes.
type consoleBudget struct {
	protocol.BCPChannelBudget
	// heard orders the channels by when this node last heard of them,
	// for forgetOldestLocked: At is the publisher's text, which neither
	// sorts as time (RFC 3339 drops trailing zeros) nor can be trusted.
	heard uint64
	// From is the clientId that published it: the gateway, or whoever
	// else a grant lets publish on system:bcp.*.
	From string `json:"from"`
}

// consoleBCPEvent is a validation failure or an anomaly: the gateway's
// event as it came, its strings clipped, under the protocol's names, so
// that the console's script reads what the gateway writes.
type consoleBCPEvent struct {
	protocol.BCPValidationEvent
	// Kind is the console's word for Type: failure, anomaly.
	Kind string `json:"kind"`
	// From is the clientId that published it.
	From string `json:"from"`
}

// bcpBook is what the console heard of the gateway.
type bcpBook struct {
	mu       sync.Mutex
	channels map[string]*consoleBudget
	// recent is a ring of the newest events; next is where the next
	// goes once it is full.
	recent []consoleBCPEvent
	next   int
	// heard counts the budgets heard (consoleBudget.heard).
	heard uint64
}

// clip bounds a string of an event.
func clip(s string) string {
	if len(s) > maxBCPField {
		return strings.ToValidUTF8(s[:maxBCPField], "")
	}
	return s
}

// clipAll bounds the strings of an event in place.
func clipAll(fields ...*string) {
	for _, f := range fields {
		*f = clip(*f)
	}
}

// observe notes the gateway's event among the messages this node routes.
func (b *bcpBook) observe(m *store.Message) {
	switch m.Topic {
	case protocol.TopicBCPBudget:
		var ev protocol.BCPChannelBudget
		if json.Unmarshal(m.Payload, &ev) != nil || ev.Type != protocol.TypeBCPChannelBudget || ev.Controller == "" || ev.Reader == "" {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.channels == nil {
			b.channels = make(map[string]*consoleBudget)
		}
		clipAll(&ev.Event, &ev.Controller, &ev.Reader, &ev.At)
		key := ev.Controller + "\x00" + ev.Reader
		if b.channels[key] == nil && len(b.channels) >= maxConsoleChannels {
			b.forgetOldestLocked()
		}
		b.channels[key] = &consoleBudget{BCPChannelBudget: ev, From: clip(m.From), heard: b.heard}
		b.heard++
	case protocol.TopicBCPValidation:
		var ev protocol.BCPValidationEvent
		if json.Unmarshal(m.Payload, &ev) != nil || ev.Controller == "" || ev.Reader == "" {
			return
		}
		e := consoleBCPEvent{Kind: "failure", From: clip(m.From)}
		switch ev.Type {
		case protocol.TypeBCPValidationFailed:
			// Anomalies are an anomaly's; a failure's would be kept
			// unbounded.
			ev.Anomalies = nil
		case protocol.TypeBCPAnomaly:
			e.Kind = "anomaly"
			anomalies := make(map[string]int, min(len(ev.Anomalies), maxBCPKinds))
			for k, n := range ev.Anomalies {
				if len(anomalies) == maxBCPKinds {
					break
				}
				anomalies[clip(k)] = n
			}
			ev.Anomalies = anomalies
		default:
			return
		}
		clipAll(&ev.Controller, &ev.Reader, &ev.QueryID, &ev.SubscriptionID, &ev.Code, &ev.At)
		e.BCPValidationEvent = ev
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.recent) < maxConsoleBCPEvents {
			b.recent = append(b.recent, e)
		} else {
			b.recent[b.next] = e
			b.next = (b.next + 1) % maxConsoleBCPEvents
		}
	}
}

func (b *bcpBook) forgetOldestLocked() {
	var oldest string
	for key, c := range b.channels {
		if oldest == "" || c.heard < b.channels[oldest].heard {
			oldest = key
		}
	}
	delete(b.channels, oldest)
}

// snapshot returns the channels by controller and reader, and the recent
// events newest first.
func (b *bcpBook) snapshot() ([]consoleBudget, []consoleBCPEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	channels := make([]consoleBudget, 0, len(b.channels))
	for _, c := range b.channels {
		channels = append(channels, *c)
	}
	recent := make([]consoleBCPEvent, 0, len(b.recent))
	for i := range b.recent {
		// Newest first: the one before next, backwards.
		recent = append(recent, b.recent[(b.next-1-i+2*len(b.recent))%len(b.recent)])
	}
	slices.SortFunc(channels, func(x, y consoleBudget) int {
		return cmp.Or(cmp.Compare(x.Controller, y.Controller), cmp.Compare(x.Reader, y.Reader))
	})
	return channels, recent
}

// bcpPage answers a page of the channels' budgets, and the recent
// validation failures and anomalies.
func (c *console) bcpPage(_ *session, w http.ResponseWriter, r *http.Request) {
	offset, limit, err := pageOf(r)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	channels, recent := c.bcp.snapshot()
	total := len(channels)
	channels = channels[min(offset, total):min(offset+limit, total)]
	httpjson.Write(w, http.StatusOK, map[string]any{"channels": channels, "total": total, "offset": offset, "recent": recent, "node": c.bus.Status().Node})
}
