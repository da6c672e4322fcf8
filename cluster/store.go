package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/jswrite"
	"github.com/bub-bus/bub/protocol"
)

// Store is the bus's durable state in JetStream: pending retries and
// holds in the bucket BUB_PENDING, keyed by the node that delivers them,
// and the dead-letter queue in the stream BUB_DLQ, shared by every node.
// It implements bus.Store with the semantics of *store.Store, whose
// records it writes; every write returns once a majority of the replicas
// has it. Its methods are safe for concurrent use, and concurrent writes
// are in flight together.
//
// Where the file store changes two things in one commit, this store
// makes two writes, ordered so that a crash between them duplicates
// rather than loses: DeadLetter appends to the queue before it deletes
// the pending entry, Requeue puts the pending entry before it removes
// the dead letter, TakeOver copies an entry before it deletes the dead
// node's.
type Store struct {
	n      *Node
	kv     jetstream.KeyValue
	dlq    jetstream.Stream
	prefix string // "p-<node>-": this node's pending ids

	// seq is the last sequence number in a pending id this node made.
	seq atomic.Uint64

	// revs holds the revision of each of this node's entries as this
	// node last wrote or read it. PutPending replaces an entry only at
	// that revision, so a node presumed dead while it was stalled does
	// not write back an entry another node took over.
	revsMu sync.Mutex
	revs   map[string]uint64

	// moving holds the entries this node is moving to itself
	// (moveEntry), by id, each with a channel closed when its move ends:
	// a second move of one entry by this node (the takeover of a dead
	// node and its owner's TakeHeld, at once) waits for the first.
	movingMu sync.Mutex
	moving   map[string]chan struct{}

	// reserved holds this node's reservations of idempotency keys
	// (idempotency.go).
	reserved reservations

	counts pendingCounts
	// keys counts the idempotency records (idempotency_count.go).
	keys    keyCounts
	watch   jetstream.ConsumeContext
	ready   chan struct{}
	readyMu sync.Once
}

// Pending keys are "<owner node>.<id>"; the subject of a key in the
// bucket's stream is kvSubjectPrefix and the key.
const kvSubjectPrefix = "$KV." + bucketPending + "."

// headerPublisher carries whom a pending entry counts against
// (store.Pending.CountsAgainst), so that the nodes count entries from a
// watch of headers only, not of every held payload.
const headerPublisher = "Bub-Publisher"

// headerHeldFor names, base64url, the owner a message held for an away
// durable subscriber waits for (store.KindDurable), so that the node the
// owner comes back to finds its held messages from the watch's headers
// (Store.TakeHeld).
const headerHeldFor = "Bub-Held-For"

// heldFor is the headerHeldFor of p: its owner's key for a message held
// for an away owner, else "".
func heldFor(p *store.Pending) string {
	if p.Kind != store.KindDurable {
		return ""
	}
	return clientKey(p.ClientID)
}

// headerKVOperation marks a KV delete or purge, as the client library
// writes it (it does not export the name).
const headerKVOperation = "KV-Operation"

// dlqSubject is where this node appends dead letters: the stream takes
// bub.dlq.>, and the node in the subject says who wrote each.
func dlqSubject(node string) string { return "bub.dlq." + node }

// opTimeout bounds each of the store's round trips: longer than a
// JetStream leader election (4–9 s), so that a write waits one out as a
// file store waits for its fsync, and bounded, so that a cluster without
// a quorum fails writes instead of hanging the bus.
const opTimeout = 30 * time.Second

// Store returns the node's durable store.
func (n *Node) Store() *Store { return n.store }

// JetStream returns the node's JetStream client and the replicas the
// cluster's streams take, for an add-on that keeps a stream of its own
// beside the bus's buckets, replicated as they are (the A2A task store,
// a2a.Options.JetStream).
func (s *Store) JetStream() (jetstream.JetStream, int) { return s.n.js, s.n.replicas }

// openStore binds the bucket and the stream and starts counting the
// pending entries; it returns once the counts hold every entry there
// was, so that the first PendingCounts is right.
func (n *Node) openStore(ctx context.Context) (*Store, error) {
	s := &Store{
		n:      n,
		kv:     n.pending,
		prefix: "p-" + n.id + "-",
		revs:   make(map[string]uint64),
		moving: make(map[string]chan struct{}),
		ready:  make(chan struct{}),
	}
	s.counts.keys = make(map[string]countedEntry)
	s.counts.by = make(map[string]store.Usage)
	s.counts.held = make(map[string]map[string]uint64)
	s.dlq = n.dlq
	// Until the bucket's stream has a leader a request gets no answer,
	// hence a bound on each try.
	var state jetstream.StreamState
	err := n.retryUntil(ctx, "read the state of bucket "+bucketPending, 5*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		info, err := n.js.Stream(ctx, "KV_"+bucketPending)
		if err == nil {
			state = info.CachedInfo().State
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if state.Msgs == 0 {
		s.readyMu.Do(func() { close(s.ready) })
	}
	var cons jetstream.Consumer
	err = n.retryUntil(ctx, "watch bucket "+bucketPending, 5*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		var err error
		cons, err = n.js.OrderedConsumer(ctx, "KV_"+bucketPending, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{kvSubjectPrefix + ">"},
			DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
			HeadersOnly:    true,
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.watch, err = cons.Consume(s.applyWatched); err != nil {
		return nil, fmt.Errorf("watch bucket %s: %w", bucketPending, err)
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		s.watch.Stop()
		return nil, fmt.Errorf("load the counts of bucket %s: %w", bucketPending, ctx.Err())
	}
	// Ids go on from the highest of the bucket's sequence and this
	// node's ids there: every id this node made was put, which moved the
	// sequence past it, or failed to be put and is in no entry.
	s.seq.Store(max(state.LastSeq, s.counts.maxSequence(s.prefix)))
	if err := s.watchKeys(ctx); err != nil {
		s.watch.Stop()
		return nil, err
	}
	return s, nil
}

// stop ends the watch of the counts.
func (s *Store) stop() { s.watch.Stop() }

// applyWatched counts one change of the bucket, seen by the watch.
func (s *Store) applyWatched(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		s.n.log.Warn("cluster: pending watch: no metadata", "subject", m.Subject(), "err", err)
		return
	}
	key := strings.TrimPrefix(m.Subject(), kvSubjectPrefix)
	live := m.Headers().Get(headerKVOperation) == ""
	// The watch takes headers only; JetStream says the record's size.
	size, _ := strconv.ParseInt(m.Headers().Get(nats.MsgSize), 10, 64)
	s.counts.apply(key, meta.Sequence.Stream, m.Headers().Get(headerPublisher), m.Headers().Get(headerHeldFor), size, live, true)
	if meta.NumPending == 0 {
		s.readyMu.Do(func() { close(s.ready) })
	}
}

// pendingCounts counts the bucket's entries and their bytes, in all and
// by whom they count against, from the watch and from this node's own
// acknowledged writes, so that a node reads its own writes at once.
type pendingCounts struct {
	mu    sync.Mutex
	keys  map[string]countedEntry
	total store.Usage
	by    map[string]store.Usage
	// held are the keys of the messages held for each away durable
	// owner (headerHeldFor), by the owner's key, at their revision.
	held map[string]map[string]uint64
}

// countedEntry is the last change known for a key, at its stream
// sequence. A delete is kept (live false) only while the watch has not
// yet seen it, so that an older put the watch delivers late is ignored.
type countedEntry struct {
	seq       uint64
	publisher string
	heldFor   string
	size      int64
	live      bool
}

// apply records the change of key at seq, unless a later one is known.
func (c *pendingCounts) apply(key string, seq uint64, publisher, heldFor string, size int64, live, watched bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.keys[key]
	if ok && old.seq >= seq {
		if watched && old.seq == seq && !old.live {
			delete(c.keys, key) // the watch caught up with the delete
		}
		return
	}
	if ok && old.heldFor != "" {
		if keys := c.held[old.heldFor]; keys != nil {
			delete(keys, key)
			if len(keys) == 0 {
				delete(c.held, old.heldFor)
			}
		}
	}
	if ok && old.live {
		c.total = usagePlus(c.total, -1, old.size)
		if u := usagePlus(c.by[old.publisher], -1, old.size); u.Entries > 0 {
			c.by[old.publisher] = u
		} else {
			delete(c.by, old.publisher)
		}
	}
	switch {
	case live:
		c.total = usagePlus(c.total, 1, size)
		c.by[publisher] = usagePlus(c.by[publisher], 1, size)
		c.keys[key] = countedEntry{seq: seq, publisher: publisher, heldFor: heldFor, size: size, live: true}
		if heldFor != "" {
			if c.held[heldFor] == nil {
				c.held[heldFor] = make(map[string]uint64)
			}
			c.held[heldFor][key] = seq
		}
	case watched:
		delete(c.keys, key)
	default:
		c.keys[key] = countedEntry{seq: seq}
	}
}

// usagePlus is u with n entries of size bytes more (or fewer).
func usagePlus(u store.Usage, n int, size int64) store.Usage {
	return store.Usage{Entries: u.Entries + n, Bytes: u.Bytes + int64(n)*size}
}

// maxSequence returns the highest sequence number of the live entries
// whose id has the prefix.
func (c *pendingCounts) maxSequence(prefix string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var top uint64
	for key, e := range c.keys {
		_, id, _ := strings.Cut(key, ".")
		if seq, err := store.ParseID(prefix, id); e.live && err == nil {
			top = max(top, seq)
		}
	}
	return top
}

// opContext bounds one operation, and ends it when the node closes.
func (s *Store) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.n.ctx, opTimeout)
}

// writeContext is opContext for a write, which it refuses at once when
// this node is in a minority: JetStream cannot take the write then, and
// it would only wait out opTimeout. (A read is tried: a replica may
// answer it.)
func (s *Store) writeContext() (context.Context, context.CancelFunc, error) {
	if err := s.n.quorum(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := s.opContext()
	return ctx, cancel, nil
}

// write runs one write under writeContext.
func (s *Store) write(fn func(ctx context.Context) error) error {
	ctx, cancel, err := s.writeContext()
	if err != nil {
		return err
	}
	defer cancel()
	return fn(ctx)
}

// checkPendingID checks that id is a pending id a node of the cluster
// made: "p-", a node id, "-" and a number.
func checkPendingID(id string) error {
	i := strings.LastIndexByte(id, '-')
	if !strings.HasPrefix(id, "p-") || i < 2 || !protocol.ValidNodeID(id[2:i]) {
		return fmt.Errorf("%w: malformed id %q, want p-<node>-<number>", store.ErrInvalid, id)
	}
	_, err := store.ParseID(id[:i+1], id)
	return err
}

func (s *Store) key(id string) string { return s.n.id + "." + id }

func (s *Store) setRev(id string, rev uint64) {
	s.revsMu.Lock()
	s.revs[id] = rev
	s.revsMu.Unlock()
}

func (s *Store) forgetRev(id string) {
	s.revsMu.Lock()
	delete(s.revs, id)
	s.revsMu.Unlock()
}

// putRecord writes v under key, counted against publisher, over
// revision over (publishKV), and returns its revision.
func (s *Store) putRecord(ctx context.Context, key, publisher, heldFor string, v []byte, over uint64) (uint64, error) {
	m := &nats.Msg{Subject: kvSubjectPrefix + key, Header: nats.Header{}, Data: v}
	m.Header.Set(headerPublisher, publisher)
	if heldFor != "" {
		m.Header.Set(headerHeldFor, heldFor)
	}
	rev, err := s.n.publishKV(ctx, m, over)
	if err != nil {
		return 0, err
	}
	s.counts.apply(key, rev, publisher, heldFor, int64(len(v)), true, false)
	return rev, nil
}

// deleteRecord deletes key, over revision over (publishKV).
func (s *Store) deleteRecord(ctx context.Context, key string, over uint64) error {
	rev, err := s.n.deleteKey(ctx, bucketPending, key, over)
	if err != nil {
		return err
	}
	s.counts.apply(key, rev, "", "", 0, false, false)
	return nil
}

// PutPending stores p under this node, or replaces the entry with p's
// ID, as *store.Store's does. A new entry's id is "p-", this node's id,
// "-" and a number from a sequence that only grows, zero-padded so that
// this node's ids sort in the order they were made. An entry this node
// wrote or read is replaced only if it is as this node left it: if
// another node took it over meanwhile, PutPending fails with
// store.ErrNotFound and writes nothing.
func (s *Store) PutPending(p *store.Pending) error {
	if err := s.putPending(p); err != nil {
		return fmt.Errorf("cluster: put pending %s: %w", pendingName(p), s.n.explain(err))
	}
	return nil
}

func (s *Store) putPending(p *store.Pending) error {
	if p == nil {
		return fmt.Errorf("%w: nil pending", store.ErrInvalid)
	}
	r := *p
	var rev uint64
	if r.ID == "" {
		r.ID = store.FormatID(s.prefix, s.seq.Add(1))
	} else {
		if err := checkPendingID(r.ID); err != nil {
			return err
		}
		s.revsMu.Lock()
		rev = s.revs[r.ID]
		s.revsMu.Unlock()
	}
	v, err := store.EncodePending(&r)
	if err != nil {
		return err
	}
	ctx, cancel, err := s.writeContext()
	if err != nil {
		return err
	}
	defer cancel()
	over := uint64(anyRevision)
	if rev > 0 {
		over = rev
	}
	newRev, err := s.putRecord(ctx, s.key(r.ID), r.CountsAgainst(), heldFor(&r), v, over)
	if isWrongRevision(err) {
		return fmt.Errorf("%w: the entry changed since this node wrote it (taken over by another node?): %w", store.ErrNotFound, err)
	}
	if err != nil {
		return err
	}
	s.setRev(r.ID, newRev)
	p.ID = r.ID
	return nil
}

// pendingName names p in an error.
func pendingName(p *store.Pending) string {
	if p == nil || p.ID == "" {
		return "(new)"
	}
	return p.ID
}

// DeletePending removes this node's pending entry id. Removing an id
// that is not there is not an error.
func (s *Store) DeletePending(id string) error {
	err := checkPendingID(id)
	if err == nil {
		err = s.write(func(ctx context.Context) error { return s.deleteRecord(ctx, s.key(id), anyRevision) })
	}
	if err != nil {
		return fmt.Errorf("cluster: delete pending %s: %w", id, s.n.explain(err))
	}
	s.forgetRev(id)
	return nil
}

// readPending reads every entry of node, payloads and meta skipped, and
// calls fn with each and its revision. A record that does not decode
// fails the read.
func (s *Store) readPending(ctx context.Context, node string, fn func(p *store.Pending, v []byte, rev uint64) error) error {
	entries, err := currentEntries(ctx, s.kv, node+".>")
	if err != nil {
		return err
	}
	for _, e := range entries {
		id := strings.TrimPrefix(e.Key(), node+".")
		p, err := store.DecodeSchedule(id, e.Value())
		if err != nil {
			return err
		}
		if err := fn(p, e.Value(), e.Revision()); err != nil {
			return err
		}
	}
	return nil
}

// PendingSchedule returns this node's pending entries, ordered by NextAt
// and then by ID, without the message's Payload and Meta.
func (s *Store) PendingSchedule() ([]*store.Pending, error) {
	ctx, cancel := s.opContext()
	defer cancel()
	var all []*store.Pending
	err := s.readPending(ctx, s.n.id, func(p *store.Pending, _ []byte, rev uint64) error {
		s.setRev(p.ID, rev)
		all = append(all, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: list pending schedule of %s: %w", s.n.id, s.n.explain(err))
	}
	sortPending(all)
	return all, nil
}

// sortPending orders entries as the file store lists them: by NextAt,
// then by id, shorter first as the scheduler orders them.
func sortPending(all []*store.Pending) {
	slices.SortFunc(all, func(a, b *store.Pending) int {
		if c := a.NextAt.Compare(b.NextAt); c != 0 {
			return c
		}
		if len(a.ID) != len(b.ID) {
			return len(a.ID) - len(b.ID)
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// LoadMessage sets p.Message's Payload and Meta to those stored for this
// node's entry p.ID. It returns an error wrapping store.ErrNotFound when
// the entry is no longer there.
func (s *Store) LoadMessage(p *store.Pending) error {
	if err := s.loadMessage(p); err != nil {
		return fmt.Errorf("cluster: load message of pending %s: %w", p.ID, s.n.explain(err))
	}
	return nil
}

func (s *Store) loadMessage(p *store.Pending) error {
	if err := checkPendingID(p.ID); err != nil {
		return err
	}
	ctx, cancel := s.opContext()
	defer cancel()
	data, err := s.leaderGet(ctx, bucketPending, kvSubjectPrefix+s.key(p.ID))
	if err != nil {
		return err
	}
	stored, err := store.DecodePending(p.ID, data)
	if err != nil {
		return err
	}
	return p.RestoreMessage(stored)
}

// leaderGet reads the entry bucket's stream holds last for subject,
// as its leader answers: store.ErrNotFound when there is none, or it was
// deleted. Not kv.Get, nor the client's stream reads: the bucket allows
// direct gets, which the client then uses and any replica answers, and a
// replica that has not applied a put yet answers "not found" for an
// entry just stored, which the bus takes for settled work and drops. The
// leader has every write acknowledged to this node.
func (s *Store) leaderGet(ctx context.Context, bucket, subject string) ([]byte, error) {
	data, _, err := s.leaderGetSeq(ctx, bucket, subject)
	return data, err
}

// leaderGetSeq is leaderGet, with the revision of what it read: of the
// entry, or of its delete marker (0 when the key never had one), which a
// compare-and-set writes over.
func (s *Store) leaderGetSeq(ctx context.Context, bucket, subject string) ([]byte, uint64, error) {
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, 0, err
	}
	// Tried again while unanswered: a request sent to a leader that just
	// died waits, unanswered, for its whole context (TestStoreCluster's
	// takeover race waited 30 s for one, and TakeHeld failed).
	var msg *nats.Msg
	err = jswrite.TryUntil(ctx, 0, func(ctx context.Context) (err error) {
		msg, err = s.n.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	var resp struct {
		Message *struct {
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
			Seq    uint64 `json:"seq"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, 0, fmt.Errorf("message get response: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.Code == 404:
		return nil, 0, store.ErrNotFound
	case resp.Error != nil:
		return nil, 0, resp.Error
	case resp.Message == nil:
		return nil, 0, errors.New("message get response without a message")
	}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return nil, 0, fmt.Errorf("message get response headers: %w", err)
		}
		// A delete or purge marker, or the marker the server writes when
		// a key's TTL ends (no KV-Operation, as kv.Get also knows).
		if h.Get("KV-Operation") != "" || h.Get("Nats-Marker-Reason") != "" {
			return nil, resp.Message.Seq, store.ErrNotFound
		}
	}
	return resp.Message.Data, resp.Message.Seq, nil
}

// PendingUsage returns what the pending entries of the whole cluster
// take, in all and those counting against identity
// (store.Pending.CountsAgainst). It reads counts kept in memory from a
// watch of the bucket: no round trip. The bytes include the idempotency
// records' (IdempotentUsage), as *store.Store's do.
func (s *Store) PendingUsage(identity string) (total, mine store.Usage, err error) {
	s.counts.mu.Lock()
	total, mine = s.counts.total, s.counts.by[identity]
	s.counts.mu.Unlock()
	keysTotal, keysMine := s.keys.usage(identity)
	total.Bytes += keysTotal.Bytes
	mine.Bytes += keysMine.Bytes
	return total, mine, nil
}

// CountPending returns the number of pending entries of the cluster.
func (s *Store) CountPending() (int, error) {
	total, _, err := s.PendingUsage("")
	return total.Entries, err
}

// DeadLetter adds d to the dead-letter queue and then removes this
// node's pending entry pendingID unless it is empty, as *store.Store's
// does. d.ID is "d-" and the stream sequence of the dead letter,
// zero-padded: the same on every node, in list order.
func (s *Store) DeadLetter(pendingID string, d *store.DeadLetter) (string, error) {
	err := func() error {
		r, err := store.PrepareDeadLetter(d)
		if err != nil {
			return err
		}
		if pendingID != "" {
			if err := checkPendingID(pendingID); err != nil {
				return err
			}
		}
		// The record's id is the stream sequence, known once it is
		// stored: the stored record has none.
		r.ID = ""
		v, err := store.EncodeDeadLetter(&r)
		if err != nil {
			return err
		}
		ctx, cancel, err := s.writeContext()
		if err != nil {
			return err
		}
		defer cancel()
		ack, err := s.n.js.Publish(ctx, dlqSubject(s.n.id), v, rideElections...)
		if err != nil {
			return err
		}
		r.ID = store.FormatID("d-", ack.Sequence)
		if pendingID != "" {
			if err := s.deleteRecord(ctx, s.key(pendingID), anyRevision); err != nil {
				return fmt.Errorf("dead letter %s stored, but the pending entry stays: %w", r.ID, err)
			}
			s.forgetRev(pendingID)
		}
		*d = r
		return nil
	}()
	if err != nil {
		return "", fmt.Errorf("cluster: dead-letter %s: %w", store.DeadLetterName(pendingID, d), s.n.explain(err))
	}
	return d.ID, nil
}

// decodeDeadLetter decodes the dead letter stored at seq.
func decodeDeadLetter(seq uint64, v []byte) (*store.DeadLetter, error) {
	d, err := store.DecodeDeadLetter("", v)
	if err != nil {
		return nil, err
	}
	d.ID = store.FormatID("d-", seq)
	return d, nil
}

// getDeadLetter reads the dead letter seq, or fails with ErrNotFound.
func (s *Store) getDeadLetter(ctx context.Context, seq uint64) (*store.DeadLetter, error) {
	m, err := s.dlq.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return decodeDeadLetter(seq, m.Data)
}

// GetDeadLetter returns the dead letter id, or an error wrapping
// store.ErrNotFound.
func (s *Store) GetDeadLetter(id string) (*store.DeadLetter, error) {
	seq, err := store.ParseID("d-", id)
	var d *store.DeadLetter
	if err == nil {
		ctx, cancel := s.opContext()
		defer cancel()
		d, err = s.getDeadLetter(ctx, seq)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: get dead letter %s: %w", id, s.n.explain(err))
	}
	return d, nil
}

// eachDeadLetter calls fn with the dead letters from the sequence from
// on, oldest first, until fn returns false or none is left.
func (s *Store) eachDeadLetter(ctx context.Context, from uint64, fn func(seq uint64, v []byte) (bool, error)) error {
	for {
		handed := false
		err := s.scanDeadLetters(ctx, from, func(seq uint64, v []byte) (bool, error) {
			handed = true
			return fn(seq, v)
		})
		// The scan's consumer is made on the stream's leader; a node on
		// another server can ask for its messages before the consumer's
		// interest has crossed the route, and nobody answers. Nothing
		// was read then, so the scan starts again a moment later.
		if !errors.Is(err, nats.ErrNoResponders) || handed || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return err
		}
	}
}

func (s *Store) scanDeadLetters(ctx context.Context, from uint64, fn func(seq uint64, v []byte) (bool, error)) error {
	info, err := s.dlq.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 || info.State.LastSeq < from {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{"bub.dlq.>"}}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := s.dlq.OrderedConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	// Every message there was when the list began is read, up to the
	// last sequence then; later ones wait for the next page.
	last := info.State.LastSeq
	for {
		batch, err := cons.Fetch(100, jetstream.FetchContext(ctx))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			seq := meta.Sequence.Stream
			if seq > last {
				return nil
			}
			more, err := fn(seq, m.Data())
			if err != nil || !more {
				return err
			}
			if seq == last || meta.NumPending == 0 {
				return nil
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
	}
}

// ListDeadLetters returns up to limit dead letters of the cluster that
// match f, oldest first, from cursor, as *store.Store's does.
func (s *Store) ListDeadLetters(f store.Filter, cursor string, limit int) (entries []*store.DeadLetter, next string, err error) {
	page, from, err := store.NewPage(f, cursor, limit)
	if err == nil {
		ctx, cancel := s.opContext()
		defer cancel()
		err = s.eachDeadLetter(ctx, max(from, 1), func(seq uint64, v []byte) (bool, error) {
			return page.Add(decodeDeadLetter(seq, v))
		})
	}
	if err != nil {
		return nil, "", fmt.Errorf("cluster: list dead letters: %w", s.n.explain(err))
	}
	return page.Entries, page.Next, nil
}

// removeDeadLetter deletes the dead letter seq, or fails with
// ErrNotFound.
func (s *Store) removeDeadLetter(ctx context.Context, seq uint64) error {
	err := s.dlq.DeleteMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		// The refusal's reason is text; whether the message is there
		// says whether it was "not found".
		if _, getErr := s.dlq.GetMsg(ctx, seq); errors.Is(getErr, jetstream.ErrMsgNotFound) {
			return store.ErrNotFound
		}
	}
	return err
}

// RemoveDeadLetter removes the dead letter id, or returns an error
// wrapping store.ErrNotFound.
func (s *Store) RemoveDeadLetter(id string) error {
	seq, err := store.ParseID("d-", id)
	if err == nil {
		err = s.write(func(ctx context.Context) error { return s.removeDeadLetter(ctx, seq) })
	}
	if err != nil {
		return fmt.Errorf("cluster: remove dead letter %s: %w", id, s.n.explain(err))
	}
	return nil
}

// Requeue puts p as PutPending does, under this node, and removes the
// dead letter id. If id is not there it returns an error wrapping
// store.ErrNotFound and leaves no pending entry: when another node
// removed the dead letter in between, the entry just put is deleted.
func (s *Store) Requeue(id string, p *store.Pending) error {
	err := func() error {
		seq, err := store.ParseID("d-", id)
		if err != nil {
			return err
		}
		ctx, cancel, err := s.writeContext()
		if err != nil {
			return err
		}
		defer cancel()
		if _, err := s.dlq.GetMsg(ctx, seq); err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return store.ErrNotFound
			}
			return err
		}
		wasNew := p != nil && p.ID == ""
		if err := s.putPending(p); err != nil {
			return err
		}
		if err := s.removeDeadLetter(ctx, seq); err != nil {
			if errors.Is(err, store.ErrNotFound) && wasNew {
				if undo := s.DeletePending(p.ID); undo != nil {
					return errors.Join(err, undo)
				}
				p.ID = ""
			}
			return err
		}
		return nil
	}()
	if err != nil {
		return fmt.Errorf("cluster: requeue dead letter %s: %w", id, s.n.explain(err))
	}
	return nil
}

// PurgeDeadLetters removes every dead letter of the cluster that matches
// f and returns how many. The zero Filter purges the stream without
// reading it; otherwise the matches are deleted one by one, several in
// flight at once.
func (s *Store) PurgeDeadLetters(f store.Filter) (int, error) {
	n, err := func() (int, error) {
		m, err := f.Matcher()
		if err != nil {
			return 0, err
		}
		ctx, cancel, err := s.writeContext()
		if err != nil {
			return 0, err
		}
		defer cancel()
		if m == nil {
			return s.purgeAll(ctx)
		}
		var doomed []uint64
		err = s.eachDeadLetter(ctx, 1, func(seq uint64, v []byte) (bool, error) {
			d, err := decodeDeadLetter(seq, v)
			if err == nil && m.Match(d) {
				doomed = append(doomed, seq)
			}
			return err == nil, err
		})
		if err != nil {
			return 0, err
		}
		var removed atomic.Int64
		err = inParallel(len(doomed), func(i int) error {
			err := s.removeDeadLetter(ctx, doomed[i])
			if err == nil {
				removed.Add(1)
			}
			if errors.Is(err, store.ErrNotFound) {
				return nil // removed by someone else meanwhile
			}
			return err
		})
		return int(removed.Load()), err
	}()
	if err != nil {
		return n, fmt.Errorf("cluster: purge dead letters: %w", s.n.explain(err))
	}
	return n, nil
}

// purgeAll purges the dead-letter stream and returns how many it held.
// The client library drops the count JetStream answers with, so this
// asks the API itself.
func (s *Store) purgeAll(ctx context.Context) (int, error) {
	msg, err := s.n.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+streamDLQ, []byte("{}"))
	if err != nil {
		return 0, err
	}
	var resp struct {
		Success bool                `json:"success"`
		Purged  uint64              `json:"purged"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("purge response: %w", err)
	}
	if resp.Error != nil {
		return 0, resp.Error
	}
	return int(resp.Purged), nil
}

// DeadLetterUsage returns what the dead-letter queue of the cluster
// takes, as its stream counts it.
func (s *Store) DeadLetterUsage() (store.Usage, error) {
	ctx, cancel := s.opContext()
	defer cancel()
	info, err := s.dlq.Info(ctx)
	if err != nil {
		return store.Usage{}, fmt.Errorf("cluster: dead-letter usage: %w", s.n.explain(err))
	}
	return store.Usage{Entries: int(info.State.Msgs), Bytes: int64(info.State.Bytes)}, nil
}

// CountDeadLetters returns the number of dead letters of the cluster.
func (s *Store) CountDeadLetters() (int, error) {
	u, err := s.DeadLetterUsage()
	return u.Entries, err
}

// Backup answers ErrNoBackup, which matches store.ErrNoFile: a
// cluster's state is JetStream's, and its backup is the operator's, with
// NATS's tools or a copy of each stopped node's directory.
func (s *Store) Backup(fn func(store.Snapshot) error) error { return ErrNoBackup }

// TakeOver moves the pending entries of node, presumed dead, to this
// node and returns them for scheduling, with their payloads dropped;
// their ids, attempts and NextAt stay as they were. Each entry is copied
// under this node, then the dead node's is deleted with a
// compare-and-delete on the revision read: the node that fails it (two
// nodes took over at once, or the dead node came back and rewrote the
// entry) deletes its copy, so each entry ends up in one place.
func (s *Store) TakeOver(ctx context.Context, node string) ([]*store.Pending, error) {
	if !protocol.ValidNodeID(node) || node == s.n.id {
		return nil, fmt.Errorf("cluster: take over pending of %q: %w: not another node's id", node, store.ErrInvalid)
	}
	type found struct {
		p   *store.Pending
		v   []byte
		rev uint64
	}
	var entries []found
	err := s.readPending(ctx, node, func(p *store.Pending, v []byte, rev uint64) error {
		entries = append(entries, found{p, v, rev})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: take over pending of %s: read: %w", node, s.n.explain(err))
	}
	movedTo := make([]bool, len(entries))
	err = inParallel(len(entries), func(i int) error {
		e := entries[i]
		var err error
		movedTo[i], err = s.moveEntry(ctx, node+"."+e.p.ID, e.p, e.v, e.rev)
		return err
	})
	var moved []*store.Pending
	for i, e := range entries {
		if movedTo[i] {
			moved = append(moved, e.p)
		}
	}
	sortPending(moved)
	if err != nil {
		return moved, fmt.Errorf("cluster: take over pending of %s: %w", node, s.n.explain(err))
	}
	return moved, nil
}

// moveEntry moves p, another node's pending entry read at key with
// revision rev (its record v), to this node, under its id, and reports
// whether this call moved it. It copies the entry, only where this node
// holds no copy yet, then deletes the one at key only at rev:
//
//   - when that delete fails on the revision (the entry changed
//     meanwhile: its node delivered or dead-lettered it, or another node
//     moved it first), the copy is deleted: each entry ends up in one
//     place;
//   - on any other error of the delete the copy stays, and moved is
//     true: the entry may be delivered twice, but is not lost;
//   - where this node holds a copy already (an earlier move, by
//     another of its callers: the takeover of a dead node and its
//     owner's TakeHeld, or one whose delete failed), only the entry at
//     key is deleted, and moved is false: the move that copied it
//     returned it. Copying it again and losing the delete would delete
//     the copy that move kept.
//
// Moves of one entry by this node are made one after the other.
func (s *Store) moveEntry(ctx context.Context, key string, p *store.Pending, v []byte, rev uint64) (moved bool, err error) {
	end, err := s.startMove(ctx, p.ID)
	if err != nil {
		return false, err
	}
	defer end()
	mine := s.key(p.ID)
	_, last, err := s.leaderGetSeq(ctx, bucketPending, kvSubjectPrefix+mine)
	switch {
	case err == nil:
		return false, s.dropMoved(ctx, key, rev)
	case !errors.Is(err, store.ErrNotFound):
		return false, fmt.Errorf("read this node's copy of %s: %w", key, err)
	}
	copyRev, err := s.putRecord(ctx, mine, p.CountsAgainst(), heldFor(p), v, last)
	if isWrongRevision(err) {
		return false, s.dropMoved(ctx, key, rev)
	}
	if err != nil {
		return false, fmt.Errorf("copy %s: %w", key, err)
	}
	err = s.deleteRecord(ctx, key, rev)
	if isWrongRevision(err) {
		if err := s.deleteRecord(ctx, mine, copyRev); err != nil && !isWrongRevision(err) {
			return false, fmt.Errorf("%s changed meanwhile, but deleting this node's copy failed: %w", key, err)
		}
		return false, nil
	}
	s.setRev(p.ID, copyRev)
	if err != nil {
		return true, fmt.Errorf("delete %s after copying it: %w", key, err)
	}
	return true, nil
}

// startMove waits until this node moves entry id no more, and
// registers a move of it; end ends that.
func (s *Store) startMove(ctx context.Context, id string) (end func(), err error) {
	for {
		s.movingMu.Lock()
		other := s.moving[id]
		if other == nil {
			done := make(chan struct{})
			s.moving[id] = done
			s.movingMu.Unlock()
			return func() {
				s.movingMu.Lock()
				delete(s.moving, id)
				s.movingMu.Unlock()
				close(done)
			}, nil
		}
		s.movingMu.Unlock()
		select {
		case <-other:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for this node's other move of %s: %w", id, ctx.Err())
		}
	}
}

// dropMoved deletes the entry at key, revision rev, which this node
// holds a copy of: nothing when it changed meanwhile.
func (s *Store) dropMoved(ctx context.Context, key string, rev uint64) error {
	if err := s.deleteRecord(ctx, key, rev); err != nil && !isWrongRevision(err) {
		return fmt.Errorf("delete %s, which this node holds already: %w", key, err)
	}
	return nil
}

// inParallel runs fn(0..n-1) with a few calls in flight at once, so
// that many round trips overlap, and returns their errors joined.
func inParallel(n int, fn func(i int) error) error {
	const inFlight = 16
	errs := make([]error, n)
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = fn(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
