package a2a

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	bolt "go.etcd.io/bbolt"
)

// Buckets of the task store. Keys of events are taskId, 0, and the
// big-endian sequence number, so a task's log reads in order; keys of
// order are agent, 0, taskId, and task ids are UUIDv7, so an agent's
// tasks read in the order they were created.
var (
	bucketTasks  = []byte("tasks")
	bucketEvents = []byte("events")
	bucketIdem   = []byte("idempotency")
	bucketOrder  = []byte("order")
	// bucketBusMsg maps the bus's id of each message published for a
	// task to the task, for the bus's dead-letter events.
	bucketBusMsg = []byte("busmessages")
)

// taskRecord is one task as stored: the A2A task and what the bus side
// needs to know of it.
type taskRecord struct {
	Agent string `json:"agent"`
	// Owner is the caller that created the task; only it may read,
	// list, cancel or follow the task.
	Owner string    `json:"owner"`
	Task  spec.Task `json:"task"`
	// Seq is the sequence number of the task's newest event.
	Seq     uint64    `json:"seq"`
	Updated time.Time `json:"updated"`
	// IdemKey is the key of the task's idempotency record, deleted with
	// the task.
	IdemKey string `json:"idemKey,omitempty"`
	// BusMessages are the bus's ids of the messages published for the
	// task, whose records are deleted with it.
	BusMessages []string `json:"busMessages,omitempty"`
	// Direct is set when the agent answered with a message rather than
	// a task (TypeMessage): SendMessage answers that message.
	Direct bool `json:"direct,omitempty"`
}

// storedEvent is one event of a task's log.
type storedEvent struct {
	Seq  uint64          `json:"seq"`
	Data json.RawMessage `json:"data"` // a StreamResponse: {"task": ...}, {"statusUpdate": ...}, ...
}

// taskStore keeps tasks, their event logs and idempotency records
// durably: boltStore in a file on one node, jetStore in JetStream on a
// cluster, where every node's server shares it.
type taskStore interface {
	// create stores rec as a new task with ev, its first event, unless
	// rec.IdemKey ("" for none) already names a task within the
	// retention window: then it returns that task and created false,
	// and stores nothing.
	create(rec *taskRecord, ev spec.Event, retention time.Duration, now time.Time) (got *taskRecord, created bool, err error)
	// get returns task id, or errNoTask.
	get(id spec.TaskID) (*taskRecord, error)
	// update changes task id: fn changes rec and returns the events
	// that say what changed, which are logged with the next sequence
	// numbers; fn returning no events changes nothing. Updates of one
	// task are serialized: fn may run more than once (jetStore runs it
	// again on the newer record when another node wrote first), so it
	// sets whatever it reports afresh at each run.
	update(id spec.TaskID, now time.Time, fn func(rec *taskRecord) ([]spec.Event, error)) (*taskRecord, error)
	// noteBusMessage records that the bus knows a message of task id
	// as busID.
	noteBusMessage(id spec.TaskID, busID string) error
	// taskOfBusMessage returns the task whose message the bus knows as
	// busID, or "".
	taskOfBusMessage(busID string) (spec.TaskID, error)
	// events returns task id's events after seq, oldest first.
	events(id spec.TaskID, after uint64) ([]storedEvent, error)
	// list returns up to limit of agent's tasks that keep returns true
	// for, in ListTasks' order, starting after the task at cursor (nil:
	// from the first), and the number of tasks kept in all.
	list(agent string, cursor *listKey, limit int, keep func(*taskRecord) bool) (page []*taskRecord, total int, err error)
	// sweep deletes the tasks unchanged for longer than retention,
	// with all that belongs to them, and returns how many it deleted.
	sweep(retention time.Duration, now time.Time) (int, error)
	close() error
}

// boltStore keeps tasks durably in a bbolt file.
type boltStore struct {
	db *bolt.DB
}

var _ taskStore = (*boltStore)(nil)

// openBoltStore opens (or creates) the task store at path.
func openBoltStore(path string) (*boltStore, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open task store %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open task store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketTasks, bucketEvents, bucketIdem, bucketOrder, bucketBusMsg} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open task store %s: %w", path, err)
	}
	return &boltStore{db: db}, nil
}

func (s *boltStore) close() error { return s.db.Close() }

// errNoTask is returned for a task the store does not hold.
var errNoTask = errors.New("no such task")

func eventKey(taskID spec.TaskID, seq uint64) []byte {
	k := make([]byte, 0, len(taskID)+9)
	k = append(k, taskID...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

func orderKey(agent string, taskID spec.TaskID) []byte {
	return append(append([]byte(agent), 0), taskID...)
}

// idemRecord is what an idempotency key maps to.
type idemRecord struct {
	TaskID spec.TaskID `json:"taskId"`
	At     time.Time   `json:"at"`
}

// create stores rec as a new task with ev, its first event, unless
// idemKey ("" for none) already names a task within the retention
// window: then it returns that task and created false, and stores
// nothing.
func (s *boltStore) create(rec *taskRecord, ev spec.Event, retention time.Duration, now time.Time) (got *taskRecord, created bool, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		idem := tx.Bucket(bucketIdem)
		if rec.IdemKey != "" {
			if raw := idem.Get([]byte(rec.IdemKey)); raw != nil {
				var ir idemRecord
				if err := json.Unmarshal(raw, &ir); err != nil {
					return fmt.Errorf("idempotency record %q: %w", rec.IdemKey, err)
				}
				if now.Sub(ir.At) < retention {
					old, err := getTx(tx, ir.TaskID)
					if err == nil {
						got = old
						return nil
					}
					if !errors.Is(err, errNoTask) {
						return err
					}
				}
			}
			raw, err := json.Marshal(idemRecord{TaskID: rec.Task.ID, At: now})
			if err != nil {
				return err
			}
			if err := idem.Put([]byte(rec.IdemKey), raw); err != nil {
				return err
			}
		}
		if tx.Bucket(bucketTasks).Get([]byte(rec.Task.ID)) != nil {
			return fmt.Errorf("task %s exists already", rec.Task.ID)
		}
		rec.Updated = now
		if err := appendTx(tx, rec, []spec.Event{ev}); err != nil {
			return err
		}
		created = true
		got = rec
		return tx.Bucket(bucketOrder).Put(orderKey(rec.Agent, rec.Task.ID), nil)
	})
	if err != nil {
		return nil, false, fmt.Errorf("store task: %w", err)
	}
	return got, created, nil
}

// appendTx gives each event the task's next sequence number, stores it,
// and stores rec.
func appendTx(tx *bolt.Tx, rec *taskRecord, evs []spec.Event) error {
	events := tx.Bucket(bucketEvents)
	for _, ev := range evs {
		raw, err := json.Marshal(spec.StreamResponse{Event: ev})
		if err != nil {
			return fmt.Errorf("encode event of task %s: %w", rec.Task.ID, err)
		}
		rec.Seq++
		if err := events.Put(eventKey(rec.Task.ID, rec.Seq), raw); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode task %s: %w", rec.Task.ID, err)
	}
	return tx.Bucket(bucketTasks).Put([]byte(rec.Task.ID), raw)
}

func getTx(tx *bolt.Tx, id spec.TaskID) (*taskRecord, error) {
	raw := tx.Bucket(bucketTasks).Get([]byte(id))
	if raw == nil {
		return nil, errNoTask
	}
	var rec taskRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, fmt.Errorf("decode task %s: %w", id, err)
	}
	return &rec, nil
}

// get returns the task id.
func (s *boltStore) get(id spec.TaskID) (*taskRecord, error) {
	var rec *taskRecord
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		rec, err = getTx(tx, id)
		return err
	})
	return rec, err
}

// update changes task id under the store's write lock: fn changes rec
// and returns the events that say what changed, which are logged with
// the next sequence numbers. fn returning no events changes nothing.
func (s *boltStore) update(id spec.TaskID, now time.Time, fn func(rec *taskRecord) ([]spec.Event, error)) (*taskRecord, error) {
	var rec *taskRecord
	err := s.db.Update(func(tx *bolt.Tx) (err error) {
		if rec, err = getTx(tx, id); err != nil {
			return err
		}
		evs, err := fn(rec)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			// Rolled back, not committed: an empty commit would still
			// cost an fsync, and most answers to a task's publish find
			// the agent's answer there first.
			return errUnchanged
		}
		rec.Updated = now
		return appendTx(tx, rec, evs)
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return rec, err
}

// errUnchanged rolls back an update that changed nothing.
var errUnchanged = errors.New("unchanged")

// noteBusMessage records that the bus knows a message of task id as
// busID.
func (s *boltStore) noteBusMessage(id spec.TaskID, busID string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		rec, err := getTx(tx, id)
		if err != nil {
			return err
		}
		rec.BusMessages = append(rec.BusMessages, busID)
		raw, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketTasks).Put([]byte(id), raw); err != nil {
			return err
		}
		return tx.Bucket(bucketBusMsg).Put([]byte(busID), []byte(id))
	})
}

// taskOfBusMessage returns the task whose message the bus knows as
// busID, or "".
func (s *boltStore) taskOfBusMessage(busID string) (id spec.TaskID, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		id = spec.TaskID(tx.Bucket(bucketBusMsg).Get([]byte(busID)))
		return nil
	})
	return id, err
}

// events returns task id's events after seq, oldest first.
func (s *boltStore) events(id spec.TaskID, after uint64) ([]storedEvent, error) {
	var out []storedEvent
	err := s.db.View(func(tx *bolt.Tx) error {
		prefix := append([]byte(id), 0)
		c := tx.Bucket(bucketEvents).Cursor()
		for k, v := c.Seek(eventKey(id, after+1)); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			out = append(out, storedEvent{Seq: binary.BigEndian.Uint64(k[len(prefix):]), Data: bytes.Clone(v)})
		}
		return nil
	})
	return out, err
}

// listKey is where a task stands in ListTasks' order (§3.1.4): newest
// status timestamp first, ties broken by the greater id.
type listKey struct {
	at int64 // the status timestamp, in Unix nanoseconds
	id spec.TaskID
}

func keyOf(rec *taskRecord) listKey {
	at := rec.Updated
	if ts := rec.Task.Status.Timestamp; ts != nil {
		at = *ts
	}
	return listKey{at: at.UnixNano(), id: rec.Task.ID}
}

// precedes reports whether k comes before o in the order.
func (k listKey) precedes(o listKey) bool {
	if k.at != o.at {
		return k.at > o.at
	}
	return k.id > o.id
}

// list returns up to limit of agent's tasks that keep returns true for,
// in ListTasks' order, starting after the task at cursor (nil: from the
// first), and the number of tasks kept in all.
func (s *boltStore) list(agent string, cursor *listKey, limit int, keep func(*taskRecord) bool) (page []*taskRecord, total int, err error) {
	var all []*taskRecord
	err = s.db.View(func(tx *bolt.Tx) error {
		prefix := append([]byte(agent), 0)
		c := tx.Bucket(bucketOrder).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			rec, err := getTx(tx, spec.TaskID(k[len(prefix):]))
			if errors.Is(err, errNoTask) {
				continue
			}
			if err != nil {
				return err
			}
			if keep(rec) {
				all = append(all, rec)
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	page, total = pageOf(all, cursor, limit)
	return page, total, nil
}

// pageOf sorts all in ListTasks' order and returns up to limit of them
// after cursor (nil: from the first), and how many there are.
func pageOf(all []*taskRecord, cursor *listKey, limit int) (page []*taskRecord, total int) {
	sort.Slice(all, func(i, j int) bool { return keyOf(all[i]).precedes(keyOf(all[j])) })
	for _, rec := range all {
		if (cursor == nil || cursor.precedes(keyOf(rec))) && len(page) < limit {
			page = append(page, rec)
		}
	}
	return page, len(all)
}

// sweep deletes the tasks unchanged for longer than retention, with
// their events, order keys and idempotency records, and returns how many
// it deleted.
func (s *boltStore) sweep(retention time.Duration, now time.Time) (int, error) {
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		var old []*taskRecord
		err := tx.Bucket(bucketTasks).ForEach(func(k, v []byte) error {
			var rec taskRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode task %s: %w", k, err)
			}
			if now.Sub(rec.Updated) > retention {
				old = append(old, &rec)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, rec := range old {
			id := rec.Task.ID
			for seq := uint64(1); seq <= rec.Seq; seq++ {
				if err := tx.Bucket(bucketEvents).Delete(eventKey(id, seq)); err != nil {
					return err
				}
			}
			if rec.IdemKey != "" {
				if err := tx.Bucket(bucketIdem).Delete([]byte(rec.IdemKey)); err != nil {
					return err
				}
			}
			for _, m := range rec.BusMessages {
				if err := tx.Bucket(bucketBusMsg).Delete([]byte(m)); err != nil {
					return err
				}
			}
			if err := tx.Bucket(bucketOrder).Delete(orderKey(rec.Agent, id)); err != nil {
				return err
			}
			if err := tx.Bucket(bucketTasks).Delete([]byte(id)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
