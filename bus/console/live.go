package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/bub-bus/bub/bus/store"
)

// The console's live views: one Server-Sent Events stream carries a
// sample of the bus's own counters every consoleSampleEvery, the last
// consoleHistory of them first, from which the browser draws the
// Overview's charts and on which the page shown refreshes itself.

const (
	consoleSampleEvery = 2 * time.Second
	// consoleHistory is how many samples are kept: ten minutes of them.
	consoleHistory = 300
	// maxConsoleAgents bounds the agents the console remembers; beyond
	// it the one heard of longest ago is forgotten.
	maxConsoleAgents = 10000
	// agentTopicPrefix starts the spawner's lifecycle topics.
	agentTopicPrefix = "system:agent."
)

// consoleSample is the bus's counters at one moment. Counters
// (published, deliveries, refusals) are totals since the node started;
// the browser takes their differences for rates.
type consoleSample struct {
	At            int64   `json:"at"` // Unix milliseconds
	Nodes         int     `json:"nodes"`
	Connections   float64 `json:"connections"`
	Subscriptions float64 `json:"subscriptions"`
	Published     float64 `json:"published"`
	Deliveries    float64 `json:"deliveries"`
	Retries       float64 `json:"retries"`
	Held          float64 `json:"held"`
	DeadLetters   float64 `json:"deadLetters"`
	Refusals      float64 `json:"refusals"`
	Slow          float64 `json:"slow"`
}

// sampleRing keeps the last consoleHistory samples; changed is closed and
// replaced on each new one, to wake the streams.
type sampleRing struct {
	mu      sync.Mutex
	all     []consoleSample
	changed chan struct{}
}

func (r *sampleRing) add(s consoleSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.all) == consoleHistory {
		r.all = append(r.all[:0], r.all[1:]...)
	}
	r.all = append(r.all, s)
	if r.changed != nil {
		close(r.changed)
	}
	r.changed = make(chan struct{})
}

// since returns the samples after at, and a channel closed on the next.
func (r *sampleRing) since(at int64) ([]consoleSample, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	var out []consoleSample
	for _, s := range r.all {
		if s.At > at {
			out = append(out, s)
		}
	}
	return out, r.changed
}

// startSampling starts the sampler on the console's first use; it runs
// until the Server shuts down.
func (c *console) startSampling() {
	c.sampler.Do(func() {
		c.samples.add(c.sample())
		go func() {
			t := time.NewTicker(consoleSampleEvery)
			defer t.Stop()
			for {
				select {
				case <-c.ctx.Done():
					return
				case <-t.C:
					c.samples.add(c.sample())
				}
			}
		}()
	})
}

// sample reads the bus's counters from its own registry, as /metrics
// would show them.
func (c *console) sample() consoleSample {
	out := consoleSample{At: time.Now().UnixMilli(), Nodes: c.bus.Status().Nodes}
	families, err := c.bus.Registry().Gather()
	if err != nil {
		c.log.Warn("console: read metrics", "err", err)
	}
	sums := make(map[string]float64, len(families))
	for _, f := range families {
		for _, m := range f.GetMetric() {
			sums[f.GetName()] += metricValue(m)
		}
	}
	out.Connections = sums["bub_connections"]
	out.Subscriptions = sums["bub_subscriptions"]
	out.Published = sums["bub_messages_published_total"]
	out.Deliveries = sums["bub_deliveries_total"]
	out.Held = sums["bub_held_messages"]
	// bub_pending counts retries and holds alike.
	out.Retries = max(0, sums["bub_pending"]-out.Held)
	out.DeadLetters = sums["bub_dead_letters"]
	out.Refusals = sums["bub_auth_refusals_total"] + sums["bub_limit_refusals_total"]
	out.Slow = sums["bub_slow_subscribers"]
	return out
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// stream serves the Server-Sent Events stream: "sample" events,
// the history first, until the browser leaves, the bus stops or the
// session ends (checked at each sample: a logout or a revoked credential
// ends the stream within consoleSampleEvery).
func (c *console) stream(_ *session, w http.ResponseWriter, r *http.Request) {
	c.startSampling()
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	var last int64
	for {
		list, changed := c.samples.since(last)
		for _, sm := range list {
			b, _ := json.Marshal(sm)
			if _, err := fmt.Fprintf(w, "event: sample\ndata: %s\n\n", b); err != nil {
				return
			}
			last = sm.At
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-c.ctx.Done():
			return
		}
		if sess, err := c.sessionOf(r); err != nil || !sess.admin.Load() {
			return
		}
	}
}

// consoleAgent is an agent as the spawner's events last described it.
type consoleAgent struct {
	AgentID    string `json:"agentId"`
	State      string `json:"state"`
	Topic      string `json:"topic,omitempty"`
	Workspace  string `json:"workspace,omitempty"`
	PID        int    `json:"pid,omitempty"`
	Status     string `json:"status,omitempty"`
	NextStart  string `json:"nextStart,omitempty"`
	Error      string `json:"error,omitempty"`
	Reason     string `json:"reason,omitempty"`
	LastEvent  string `json:"lastEvent"`
	LastActive string `json:"lastActive"`
	// From is the clientId that published the event: the spawner, or
	// whoever else a grant lets publish on system:agent.*.
	From string `json:"from"`
}

// agentBook is the agents the console has heard of.
type agentBook struct {
	mu  sync.Mutex
	all map[string]*consoleAgent
}

// observe notes a spawner's lifecycle event among the messages this node
// routes.
func (b *agentBook) observe(m *store.Message) {
	if !strings.HasPrefix(m.Topic, agentTopicPrefix) {
		return
	}
	var ev struct {
		Type       string `json:"type"`
		Event      string `json:"event"`
		AgentID    string `json:"agent_id"`
		Topic      string `json:"topic"`
		Workspace  string `json:"workspace"`
		PID        int    `json:"pid"`
		Status     string `json:"status"`
		Restarting bool   `json:"restarting"`
		NextStart  string `json:"next_start"`
		Error      string `json:"error"`
		Reason     string `json:"reason"`
		Timestamp  string `json:"timestamp"`
	}
	if json.Unmarshal(m.Payload, &ev) != nil || ev.Type != "agent_event" || ev.AgentID == "" {
		return
	}
	state := map[string]string{"spawned": "starting", "ready": "running", "woken": "running", "hibernated": "hibernated",
		"exited": "exited", "spawn_failed": "failed"}[ev.Event]
	if state == "" {
		return
	}
	if ev.Restarting {
		state = "restarting"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.all == nil {
		b.all = make(map[string]*consoleAgent)
	}
	a := b.all[ev.AgentID]
	if a == nil {
		if len(b.all) >= maxConsoleAgents {
			b.forgetOldestLocked()
		}
		a = &consoleAgent{AgentID: ev.AgentID}
		b.all[ev.AgentID] = a
	}
	a.State, a.LastEvent, a.LastActive, a.From = state, ev.Event, ev.Timestamp, m.From
	a.Status, a.NextStart, a.Error, a.Reason = ev.Status, ev.NextStart, ev.Error, ev.Reason
	if ev.Topic != "" {
		a.Topic = ev.Topic
	}
	if ev.Workspace != "" {
		a.Workspace = ev.Workspace
	}
	if ev.PID != 0 || state != "running" {
		a.PID = ev.PID
	}
}

func (b *agentBook) forgetOldestLocked() {
	var oldest *consoleAgent
	for _, a := range b.all {
		if oldest == nil || a.LastActive < oldest.LastActive {
			oldest = a
		}
	}
	delete(b.all, oldest.AgentID)
}

func (b *agentBook) list() []consoleAgent {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]consoleAgent, 0, len(b.all))
	for _, a := range b.all {
		out = append(out, *a)
	}
	return out
}
