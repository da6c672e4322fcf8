package journal

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/protocol"
)

// The message journal records what happens to each message this node
// handles, for GET /v1/events, its stream (http.go) and bub trace.
// It lives in memory, bounded by age and bytes: it is a window for
// diagnosis, not a log of record (the store keeps what must survive),
// and fsyncing every event would cost the relay far more than the
// journal is worth (docs/OPERATIONS.md, "Message journal").
//
// Events are kept in blocks of journalBlockSize. Only the newest block is
// written to, under mu; a reader takes mu only to copy the list of blocks
// and the newest block's length, and reads the events without it: an
// event is never changed once written, and a block dropped by retention
// stays whole for a reader still holding it. Retention drops whole
// blocks, oldest first.

// Options configure the message journal.
type Options struct {
	// Off turns the journal off: nothing is recorded and GET /v1/events
	// answers 404.
	Off bool
	// MaxAge drops events older than it. Default: 1h.
	MaxAge time.Duration
	// MaxBytes bounds the journal's memory, as estimated per event
	// (journalEventBytes plus its strings). Default: 64 MiB.
	MaxBytes int64
	// Payloads records each accepted message's payload; off by default,
	// as whoever may read the journal is not every message's subscriber
	// in spirit, and payloads may be large.
	Payloads bool
}

func (o *Options) setDefaults() {
	if o.MaxAge <= 0 {
		o.MaxAge = time.Hour
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 64 << 20
	}
}

// journalBlockSize is the events in one block: the unit retention drops.
const journalBlockSize = 256

// journalEventBytes is what an event costs in memory besides its
// strings: the struct in its block.
const journalEventBytes = int(unsafe.Sizeof(protocol.JournalEvent{}))

// journal is the events a Journal keeps; nil when off.
type journal struct {
	opts Options
	// node is recorded in every event; boot starts every cursor, so that
	// a cursor of an earlier process or another node is recognised.
	node, boot string

	recorded prometheus.Counter
	// dropped counts by reason; droppedAge and droppedBytes are its
	// two series, looked up once.
	dropped                  *prometheus.CounterVec
	droppedAge, droppedBytes prometheus.Counter
	retained                 prometheus.GaugeFunc
	size                     prometheus.GaugeFunc

	mu sync.Mutex
	// blocks are oldest first; the last is the one written to.
	blocks []*journalBlock
	// next is the sequence number of the next event; the first is 1.
	next  uint64
	bytes int64
	// wake, when a reader waits for events, is closed by the next
	// record; nil when nobody waits, so that recording allocates nothing
	// for readers that are not there.
	wake chan struct{}
	// spare is the next block to write to, made ready by readyBlock;
	// nil until it is.
	spare *journalBlock
	// closed ends the streams (Shutdown).
	closed chan struct{}
}

// journalBlock holds events first, first+1, ... in events[:n].
type journalBlock struct {
	first  uint64
	n      int
	bytes  int64
	events [journalBlockSize]protocol.JournalEvent
}

// newJournal makes the journal of node, its metrics registered with
// reg; nil when o is off.
func newJournal(o Options, node string, reg prometheus.Registerer) *journal {
	if o.Off {
		return nil
	}
	o.setDefaults()
	boot := make([]byte, 6)
	_, _ = rand.Read(boot)
	j := &journal{opts: o, node: node, boot: hex.EncodeToString(boot), next: 1, closed: make(chan struct{})}
	j.recorded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bub_journal_events_total", Help: "Events recorded in the message journal.",
	})
	j.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_journal_dropped_total", Help: "Journal events dropped by retention, oldest first, by reason (age, bytes).",
	}, []string{"reason"})
	j.droppedAge, j.droppedBytes = j.dropped.WithLabelValues("age"), j.dropped.WithLabelValues("bytes")
	j.retained = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bub_journal_events", Help: "Events the message journal holds now.",
	}, func() float64 {
		j.mu.Lock()
		defer j.mu.Unlock()
		if len(j.blocks) == 0 {
			return 0
		}
		return float64(j.next - j.blocks[0].first)
	})
	j.size = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bub_journal_bytes", Help: "Bytes the message journal holds now, as estimated (--journal-max-bytes bounds it).",
	}, func() float64 {
		j.mu.Lock()
		defer j.mu.Unlock()
		return float64(j.bytes)
	})
	reg.MustRegister(j.recorded, j.dropped, j.retained, j.size)
	return j
}

// eventBytes estimates what ev holds in memory.
func eventBytes(ev *protocol.JournalEvent) int64 {
	n := journalEventBytes + len(ev.MessageID) + len(ev.Topic) + len(ev.CorrelationID) + len(ev.From) +
		len(ev.Identity) + len(ev.Remote) + len(ev.ClientID) + len(ev.Subscription) + len(ev.Error) +
		len(ev.DeadLetterID) + len(ev.Payload) + 16*len(ev.Chain)
	for _, c := range ev.Chain {
		n += len(c)
	}
	return int64(n)
}

// record appends ev, stamped with the time and node, and drops what
// retention says to.
func (j *journal) record(ev *protocol.JournalEvent) {
	ev.Node = j.node
	size := eventBytes(ev)
	now := time.Now()
	j.mu.Lock()
	// The journal's order is its time order: a cluster's page merges
	// the nodes' journals by time (cluster.go). The clock is read
	// before mu, which records wait on, so an event that waited behind
	// one stamped later takes that one's time.
	last := j.lastLocked()
	if last != nil && last.n > 0 && now.Before(last.events[last.n-1].Time) {
		now = last.events[last.n-1].Time
	}
	ev.Time = now
	fresh := false
	if last == nil || last.n == journalBlockSize {
		// A new block is the one allocation, once per journalBlockSize
		// events; made ready outside mu by the record that took the
		// one before (readyBlock).
		last, j.spare = j.spare, nil
		if last == nil {
			last = new(journalBlock)
		}
		last.first = j.next
		j.blocks = append(j.blocks, last)
		fresh = true
	}
	last.events[last.n] = *ev
	last.n++
	last.bytes += size
	j.bytes += size
	j.next++
	j.trimLocked(ev.Time)
	if j.wake != nil {
		close(j.wake)
		j.wake = nil
	}
	j.mu.Unlock()
	j.recorded.Inc()
	if fresh {
		j.readyBlock()
	}
}

// readyBlock makes the journal's next block, outside mu: its allocation
// and the first write to each of its pages (the kernel's page faults)
// cost more than the copying of the events into it, and under mu every
// other record would wait for them.
func (j *journal) readyBlock() {
	b := new(journalBlock)
	for i := range b.events {
		b.events[i].Attempt = 0
	}
	j.mu.Lock()
	if j.spare == nil {
		j.spare = b
	}
	j.mu.Unlock()
}

func (j *journal) lastLocked() *journalBlock {
	if len(j.blocks) == 0 {
		return nil
	}
	return j.blocks[len(j.blocks)-1]
}

// trimLocked drops the oldest blocks while the journal is over its bytes
// or their newest event is past its age; the block written to stays.
func (j *journal) trimLocked(now time.Time) {
	for len(j.blocks) > 1 {
		b := j.blocks[0]
		var count prometheus.Counter
		switch {
		case j.bytes > j.opts.MaxBytes:
			count = j.droppedBytes
		case now.Sub(b.events[b.n-1].Time) > j.opts.MaxAge:
			count = j.droppedAge
		default:
			return
		}
		j.blocks[0] = nil
		j.blocks = j.blocks[1:]
		j.bytes -= b.bytes
		count.Add(float64(b.n))
	}
}

// close ends every stream waiting for events (the bus shuts down).
func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	select {
	case <-j.closed:
	default:
		close(j.closed)
	}
}

// journalQuery selects events: those of one message, or of one message
// and the messages correlated with it, of one kind, of topics matching a
// pattern, between two times. reader is what the reader may subscribe
// to (its grant), nil for everything; hidePayloads leaves payloads out (the console shows
// one only when its operator asks).
type journalQuery struct {
	messageID     string
	correlationID string
	kind          string
	topic         *protocol.Pattern
	since, until  time.Time
	// may is the reader's decision, remembered per topic (setReader); nil
	// for a reader that sees everything.
	may          func(topic string) bool
	reader       *auth.Access
	hidePayloads bool
}

func (q *journalQuery) match(ev *protocol.JournalEvent, oldest time.Time) bool {
	if ev.Time.Before(oldest) || ev.Time.Before(q.since) || (!q.until.IsZero() && ev.Time.After(q.until)) {
		return false
	}
	if q.messageID != "" && ev.MessageID != q.messageID {
		return false
	}
	if q.correlationID != "" && ev.MessageID != q.correlationID && ev.CorrelationID != q.correlationID {
		return false
	}
	if q.kind != "" && ev.Kind != q.kind {
		return false
	}
	if q.topic != nil && !q.topic.Match(ev.Topic) {
		return false
	}
	return q.may == nil || q.may(ev.Topic)
}

// cursor is the cursor of event seq.
func (j *journal) cursor(seq uint64) string {
	return j.boot + "." + strconv.FormatUint(seq, 10)
}

// parseCursor reads a cursor: the sequence number of the event it names.
// A cursor of another process (an earlier run, another node) reads as 0:
// every event this journal holds is after it.
func (j *journal) parseCursor(c string) (uint64, error) {
	if c == "" {
		return 0, nil
	}
	boot, seq, ok := splitCursor(c)
	if !ok {
		return 0, fmt.Errorf("cursor %q is not one this API gave (BOOT.SEQUENCE)", c)
	}
	if boot != j.boot {
		return 0, nil
	}
	j.mu.Lock()
	next := j.next
	j.mu.Unlock()
	if seq >= next {
		return 0, fmt.Errorf("cursor %q is ahead of this journal's newest event", c)
	}
	return seq, nil
}

// splitCursor reads a node's cursor, BOOT.SEQUENCE.
func splitCursor(c string) (boot string, seq uint64, ok bool) {
	boot, n, ok := strings.Cut(c, ".")
	seq, err := strconv.ParseUint(n, 10, 64)
	return boot, seq, ok && boot != "" && err == nil
}

// read returns up to limit events after seq that q matches, the sequence
// number of the last event it looked at (the next page's start), whether
// events were left, and whether events after seq were dropped already.
func (j *journal) read(after uint64, limit int, q *journalQuery) (page []protocol.JournalEvent, last uint64, more, gap bool) {
	j.mu.Lock()
	blocks := append([]*journalBlock(nil), j.blocks...)
	end := j.next
	j.mu.Unlock()
	last = after
	if len(blocks) == 0 {
		return nil, last, false, false
	}
	if first := blocks[0].first; after+1 < first {
		gap = after > 0
		last = first - 1
	}
	oldest := time.Now().Add(-j.opts.MaxAge)
	for _, b := range blocks {
		if b.first+uint64(journalBlockSize) <= last+1 {
			continue
		}
		// Only events before end were written when the blocks were
		// copied; b.n may have moved since, and is not read unlocked.
		n := int(min(end-b.first, journalBlockSize))
		for i := int(last + 1 - b.first); i < n; i++ {
			if len(page) == limit {
				return page, last, true, gap
			}
			ev := &b.events[i]
			last = b.first + uint64(i)
			if q.match(ev, oldest) {
				e := *ev
				e.Cursor = j.cursor(last)
				if q.hidePayloads {
					e.Payload = nil
				}
				page = append(page, e)
			}
		}
	}
	return page, last, false, gap
}

// waitFor returns a channel closed once an event after seq is recorded,
// or nil if one is there already.
func (j *journal) waitFor(seq uint64) <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.next > seq+1 {
		return nil
	}
	if j.wake == nil {
		j.wake = make(chan struct{})
	}
	return j.wake
}

// Observe records ev: the journal is an observer of the core
// (bus.Observer). An accepted message's payload is copied when the
// journal keeps payloads.
func (j *journal) Observe(ev bus.Event) {
	e := ev.JournalEvent
	if j.opts.Payloads && e.Kind == protocol.JournalAccepted && ev.Message != nil {
		e.Payload = bytes.Clone(ev.Message.Payload)
	}
	j.record(&e)
}
