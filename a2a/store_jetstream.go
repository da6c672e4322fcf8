package a2a

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/internal/jswrite"
)

// On a cluster the task store is the stream BUB_A2A, replicated as the
// bus's buckets are, so that every node's server reads and writes the
// same tasks (docs/A2A.md, "Cluster"). Its subjects:
//
//   - bub.a2a.task.<hash of the task id>: one message per change of the
//     task, the record as it is after the change, the events the change
//     logged and the stream sequence of the change before. The last
//     message is the task; the events are read back from it along that
//     chain. A change is written only over the message it read (the
//     stream's expected last sequence per subject), so two nodes
//     changing one task at once cannot lose an event: the second reads
//     the first's change and runs its own again on it.
//   - bub.a2a.idem.<hash of the key>: an idempotency record, with a TTL
//     of the retention window.
//   - bub.a2a.bus.<hash of the id>: the task of a message the bus may
//     dead-letter later, with a TTL of a week (busMessageTTL).
//
// Hashes, because a subject token cannot hold every character of an id
// or a key. Reads go to the stream's leader (the stream allows no
// direct gets), so that a node reads at once what another just wrote.
const (
	jetStreamName = "BUB_A2A"
	subjectTask   = "bub.a2a.task."
	subjectIdem   = "bub.a2a.idem."
	subjectBus    = "bub.a2a.bus."
	// headerTask names the task of a change, for the watch that tells
	// every node's streams.
	headerTask = "Bub-A2A-Task"
)

// jsTimeout bounds each of the store's writes, and all the tries of a
// read: longer than a JetStream leader election, as the cluster's own
// store's.
const jsTimeout = 30 * time.Second

// openTimeout bounds the making of the stream and its watch, as the
// cluster bounds a node's start.
const openTimeout = time.Minute

// read runs f, a read of the stream, again while JetStream leaves it
// unanswered or says it has no leader, for up to jsTimeout
// (jswrite.TryUntil). A read that found nothing, or failed otherwise, is
// not tried again.
func read(f func(ctx context.Context) error) error {
	return jswrite.TryUntil(context.Background(), jsTimeout, f)
}

// jetStore keeps tasks in the stream BUB_A2A.
type jetStore struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	watch  jetstream.ConsumeContext
}

var _ taskStore = (*jetStore)(nil)

// taskChange is one message of a task's subject.
type taskChange struct {
	Rec    *taskRecord   `json:"rec"`
	Events []storedEvent `json:"events,omitempty"`
	// Prev is the stream sequence of the task's change before, 0 for
	// its first.
	Prev uint64 `json:"prev,omitempty"`
}

// openJetStore makes (or binds) the stream, with replicas copies, and
// starts watching it: changed hears of every change of a task by any
// node.
func openJetStore(ctx context.Context, js jetstream.JetStream, replicas int, changed func(spec.TaskID)) (*jetStore, error) {
	// Every node makes it as it starts, all at once when the cluster
	// does, while JetStream may still be electing leaders.
	var stream jetstream.Stream
	err := jswrite.TryUntil(ctx, openTimeout, func(ctx context.Context) (err error) {
		stream, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:              jetStreamName,
			Description:       "A2A tasks, their event logs and idempotency records (bub serve --a2a-config)",
			Subjects:          []string{"bub.a2a.>"},
			Storage:           jetstream.FileStorage,
			Replicas:          max(1, replicas),
			MaxMsgsPerSubject: -1,
			AllowMsgTTL:       true,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("a2a: task store: make stream %s: %w", jetStreamName, err)
	}
	s := &jetStore{js: js, stream: stream}
	var cons jetstream.Consumer
	err = jswrite.TryUntil(ctx, openTimeout, func(ctx context.Context) (err error) {
		cons, err = stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subjectTask + ">"},
			DeliverPolicy:  jetstream.DeliverNewPolicy,
			HeadersOnly:    true,
		})
		if err != nil {
			return err
		}
		s.watch, err = cons.Consume(func(m jetstream.Msg) {
			if id := m.Headers().Get(headerTask); id != "" {
				changed(spec.TaskID(id))
			}
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("a2a: task store: watch stream %s: %w", jetStreamName, err)
	}
	return s, nil
}

func (s *jetStore) close() error {
	s.watch.Stop()
	return nil
}

// token is the subject token of an id or key.
func token(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:])
}

func taskSubject(id spec.TaskID) string { return subjectTask + token(string(id)) }

// last returns the last message of subject and its stream sequence,
// or nil and 0 when the subject has none.
func (s *jetStore) last(subject string) ([]byte, uint64, error) {
	var m *jetstream.RawStreamMsg
	err := read(func(ctx context.Context) (err error) {
		m, err = s.stream.GetLastMsgForSubject(ctx, subject)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", subject, err)
	}
	return m.Data, m.Sequence, nil
}

// lastChange returns task id's last change and its stream sequence, or
// errNoTask.
func (s *jetStore) lastChange(id spec.TaskID) (*taskChange, uint64, error) {
	data, seq, err := s.last(taskSubject(id))
	if err != nil {
		return nil, 0, err
	}
	if data == nil {
		return nil, 0, errNoTask
	}
	var ch taskChange
	if err := json.Unmarshal(data, &ch); err != nil || ch.Rec == nil {
		return nil, 0, fmt.Errorf("decode task %s: %v", id, err)
	}
	return &ch, seq, nil
}

// publish writes data on subject over its message at sequence over (0:
// none yet; ok false when another write came first), with the headers
// given as name, value pairs.
func (s *jetStore) publish(subject string, data []byte, over uint64, ttl time.Duration, header ...string) (ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), jsTimeout)
	defer cancel()
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	for i := 0; i+1 < len(header); i += 2 {
		m.Header.Set(header[i], header[i+1])
	}
	opts := slices.Clone(jswrite.RideElections)
	if over != anyLast {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(over))
	}
	if ttl > 0 {
		opts = append(opts, jetstream.WithMsgTTL(ttl))
	}
	_, err = s.js.PublishMsg(ctx, m, opts...)
	if jswrite.WrongLast(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("write %s: %w", subject, err)
	}
	return true, nil
}

// writeChange writes ch as task id's change over the one at sequence
// prev (0: as the task's first); ok is false when another change came
// first.
func (s *jetStore) writeChange(ch *taskChange, prev uint64) (ok bool, err error) {
	ch.Prev = prev
	data, err := json.Marshal(ch)
	if err != nil {
		return false, fmt.Errorf("encode task %s: %w", ch.Rec.Task.ID, err)
	}
	id := ch.Rec.Task.ID
	return s.publish(taskSubject(id), data, prev, 0, headerTask, string(id))
}

// logged gives each event the record's next sequence number.
func logged(rec *taskRecord, evs []spec.Event) ([]storedEvent, error) {
	out := make([]storedEvent, 0, len(evs))
	for _, ev := range evs {
		raw, err := json.Marshal(spec.StreamResponse{Event: ev})
		if err != nil {
			return nil, fmt.Errorf("encode event of task %s: %w", rec.Task.ID, err)
		}
		rec.Seq++
		out = append(out, storedEvent{Seq: rec.Seq, Data: raw})
	}
	return out, nil
}

// idemWait is how long create waits for the task an idempotency record
// names to appear: the node that wrote the record writes the task next.
// A record whose task is still missing after it was left by a node that
// died in between, and is taken over.
const idemWait = 10 * time.Second

func (s *jetStore) create(rec *taskRecord, ev spec.Event, retention time.Duration, now time.Time) (*taskRecord, bool, error) {
	if rec.IdemKey != "" {
		old, err := s.claimKey(rec, retention, now)
		if old != nil || err != nil {
			return old, false, err
		}
	}
	rec.Updated = now
	evs, err := logged(rec, []spec.Event{ev})
	if err != nil {
		return nil, false, err
	}
	ok, err := s.writeChange(&taskChange{Rec: rec, Events: evs}, 0)
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("store task: %w", err)
	case !ok:
		return nil, false, fmt.Errorf("store task: task %s exists already", rec.Task.ID)
	}
	return rec, true, nil
}

// claimKey writes rec's idempotency record, naming rec's task, unless
// the key names a task within the retention window already: then it
// returns that task.
func (s *jetStore) claimKey(rec *taskRecord, retention time.Duration, now time.Time) (*taskRecord, error) {
	subject := subjectIdem + token(rec.IdemKey)
	raw, err := json.Marshal(idemRecord{TaskID: rec.Task.ID, At: now})
	if err != nil {
		return nil, err
	}
	waited := time.Time{}
	for {
		data, seq, err := s.last(subject)
		if err != nil {
			return nil, fmt.Errorf("store task: %w", err)
		}
		if data != nil {
			var ir idemRecord
			if err := json.Unmarshal(data, &ir); err != nil {
				return nil, fmt.Errorf("store task: idempotency record %q: %w", rec.IdemKey, err)
			}
			if now.Sub(ir.At) < retention {
				old, err := s.get(ir.TaskID)
				switch {
				case err == nil:
					return old, nil
				case !errors.Is(err, errNoTask):
					return nil, err
				case waited.IsZero():
					waited = time.Now()
				}
				// Written by a node that writes the task next, or
				// died first: wait for the one, not forever for the
				// other.
				if time.Since(waited) < idemWait && time.Since(ir.At) < idemWait {
					time.Sleep(50 * time.Millisecond)
					continue
				}
			}
		}
		ok, err := s.publish(subject, raw, seq, retention)
		if err != nil {
			return nil, fmt.Errorf("store task: %w", err)
		}
		if ok {
			return nil, nil
		}
		// Another node claimed the key meanwhile: its task it is.
	}
}

func (s *jetStore) get(id spec.TaskID) (*taskRecord, error) {
	ch, _, err := s.lastChange(id)
	if err != nil {
		return nil, err
	}
	return ch.Rec, nil
}

// change runs fn on task id's last record and writes what it returns,
// again on a newer record while another node's change comes first. fn
// returns the events to log and whether to write the record at all.
func (s *jetStore) change(id spec.TaskID, now time.Time, fn func(rec *taskRecord) (evs []spec.Event, write bool, err error)) (*taskRecord, error) {
	for {
		ch, seq, err := s.lastChange(id)
		if err != nil {
			return nil, err
		}
		rec := ch.Rec
		evs, write, err := fn(rec)
		if err != nil || !write {
			return rec, err
		}
		rec.Updated = now
		logs, err := logged(rec, evs)
		if err != nil {
			return nil, err
		}
		ok, err := s.writeChange(&taskChange{Rec: rec, Events: logs}, seq)
		if err != nil {
			return nil, err
		}
		if ok {
			return rec, nil
		}
	}
}

func (s *jetStore) update(id spec.TaskID, now time.Time, fn func(rec *taskRecord) ([]spec.Event, error)) (*taskRecord, error) {
	return s.change(id, now, func(rec *taskRecord) ([]spec.Event, bool, error) {
		evs, err := fn(rec)
		return evs, len(evs) > 0, err
	})
}

// noteBusMessage writes the bus's id first, then the record that lists
// it: a node that dies in between leaves an entry its TTL removes,
// rather than a dead letter no task hears of.
func (s *jetStore) noteBusMessage(id spec.TaskID, busID string) error {
	if _, err := s.publish(subjectBus+token(busID), []byte(id), anyLast, busMessageTTL); err != nil {
		return err
	}
	_, err := s.change(id, time.Now(), func(rec *taskRecord) ([]spec.Event, bool, error) {
		rec.BusMessages = append(rec.BusMessages, busID)
		return nil, true, nil
	})
	return err
}

// anyLast is publish's over for a write whatever the subject holds; no
// stream sequence reaches it.
const anyLast = ^uint64(0)

// busMessageTTL bounds how long the task of a bus message is kept: the
// bus dead-letters a message within its hold lifetime (1 h by default)
// or its retries (minutes).
const busMessageTTL = 7 * 24 * time.Hour

func (s *jetStore) taskOfBusMessage(busID string) (spec.TaskID, error) {
	data, _, err := s.last(subjectBus + token(busID))
	return spec.TaskID(data), err
}

// events walks task id's changes back from its last, along their Prev,
// until it has every event after after. A change swept away ends the
// walk: the log starts after it.
func (s *jetStore) events(id spec.TaskID, after uint64) ([]storedEvent, error) {
	ch, _, err := s.lastChange(id)
	if errors.Is(err, errNoTask) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []storedEvent
	for {
		for i := len(ch.Events) - 1; i >= 0; i-- {
			if ch.Events[i].Seq > after {
				out = append(out, ch.Events[i])
			}
		}
		if ch.Prev == 0 || len(ch.Events) > 0 && ch.Events[0].Seq <= after+1 {
			break
		}
		var m *jetstream.RawStreamMsg
		err := read(func(ctx context.Context) (err error) {
			m, err = s.stream.GetMsg(ctx, ch.Prev)
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read task %s's change %d: %w", id, ch.Prev, err)
		}
		ch = new(taskChange)
		if err := json.Unmarshal(m.Data, ch); err != nil {
			return nil, fmt.Errorf("decode task %s's change %d: %w", id, m.Sequence, err)
		}
	}
	slices.Reverse(out)
	return out, nil
}

// scan calls fn with every task's last change and its stream sequence.
// It reads the last message of every task's subject, through a
// consumer made for the pass: ListTasks and the sweep cost a pass over
// every task, as on one node.
func (s *jetStore) scan(fn func(ch *taskChange, seq uint64) error) error {
	var tasks map[spec.TaskID]taskAt
	err := read(func(ctx context.Context) (err error) {
		tasks, err = s.lastChanges(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("read tasks: %w", err)
	}
	for _, t := range tasks {
		if err := fn(t.ch, t.seq); err != nil {
			return err
		}
	}
	return nil
}

// taskAt is a task's last change and its stream sequence.
type taskAt struct {
	ch  *taskChange
	seq uint64
}

// lastChanges reads every task's last change, through a consumer made
// for the pass.
func (s *jetStore) lastChanges(ctx context.Context) (map[spec.TaskID]taskAt, error) {
	cons, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     subjectTask + ">",
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		// Left behind, it ends with its InactiveThreshold.
		_ = s.stream.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name)
	}()
	// A change written during the pass comes after the task's last
	// change as the pass began: the later wins.
	tasks := map[spec.TaskID]taskAt{}
	for left := cons.CachedInfo().NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 256)), jetstream.FetchContext(ctx))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			left = meta.NumPending
			ch := new(taskChange)
			if err := json.Unmarshal(m.Data(), ch); err != nil || ch.Rec == nil {
				return nil, fmt.Errorf("decode the task at %d of %s: %v", meta.Sequence.Stream, jetStreamName, err)
			}
			tasks[ch.Rec.Task.ID] = taskAt{ch, meta.Sequence.Stream}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
	}
	return tasks, nil
}

func (s *jetStore) list(agent string, cursor *listKey, limit int, keep func(*taskRecord) bool) ([]*taskRecord, int, error) {
	var all []*taskRecord
	err := s.scan(func(ch *taskChange, _ uint64) error {
		if ch.Rec.Agent == agent && keep(ch.Rec) {
			all = append(all, ch.Rec)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	page, total := pageOf(all, cursor, limit)
	return page, total, nil
}

// sweep purges the subject of each task unchanged for longer than
// retention, up to the change it read: a change another node writes
// meanwhile stays, with the task. Every node's server sweeps; a purge
// done twice purges nothing the second time. The idempotency records
// and bus ids end with their TTL.
func (s *jetStore) sweep(retention time.Duration, now time.Time) (int, error) {
	type old struct {
		id  spec.TaskID
		seq uint64
	}
	var olds []old
	err := s.scan(func(ch *taskChange, seq uint64) error {
		if now.Sub(ch.Rec.Updated) > retention {
			olds = append(olds, old{ch.Rec.Task.ID, seq})
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for i, o := range olds {
		err := read(func(ctx context.Context) error {
			return s.stream.Purge(ctx, jetstream.WithPurgeSubject(taskSubject(o.id)), jetstream.WithPurgeSequence(o.seq+1))
		})
		if err != nil {
			return i, fmt.Errorf("delete task %s: %w", o.id, err)
		}
	}
	return len(olds), nil
}
