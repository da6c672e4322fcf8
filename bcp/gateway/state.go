package gateway

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/protocol"
)

// FileName is the gateway's state file in its data directory.
const FileName = "bcp-gateway.db"

// Buckets of the state file.
var (
	bucketQueries = []byte("queries") // query id → queryRecord
	bucketBudgets = []byte("budgets") // controller "/" reader → budgetRecord
	bucketOutbox  = []byte("outbox")  // topic "\x00" sequence → outMessage, sent in order per topic
	bucketAudit   = []byte("audit")   // sequence → AuditRecord, append-only
	bucketSeen    = []byte("seen")    // bus messageId → seenRecord
	bucketPushes  = []byte("pushes")  // reader "/" controller "/" subscription → []time.Time of the last hour
	bucketParked  = []byte("parked")  // reader "\x00" sequence → outMessage waiting for the Reader's list
	bucketReaders = []byte("readers") // reader → readerRecord
	allBuckets    = [][]byte{bucketQueries, bucketBudgets, bucketOutbox, bucketAudit, bucketSeen, bucketApprovals, bucketPushes, bucketParked, bucketReaders}
)

// Query states.
const (
	statePending   = "pending"
	stateDelivered = "delivered"
	stateFailed    = "failed"
)

// queryRecord is a query the gateway accepted.
type queryRecord struct {
	ID         string    `json:"id"`
	Controller string    `json:"controller"`
	Reader     string    `json:"reader"`
	Spec       *bcp.Spec `json:"spec"`
	Cost       bcp.Bits  `json:"cost"`
	Attempts   int       `json:"attempts"`
	State      string    `json:"state"`
	Code       string    `json:"code,omitempty"` // why it failed
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// budgetRecord is a channel's account. Charges keeps the recent charges
// with their times, so that a session reset signalled by a bus event,
// which can arrive after the new session's first query, spares the
// charges made after the reset's moment.
type budgetRecord struct {
	Usage   bcp.Usage `json:"usage"`
	Charges []charge  `json:"charges,omitempty"`
}

type charge struct {
	At       time.Time    `json:"at"`
	Category bcp.Category `json:"category"`
	Bits     bcp.Bits     `json:"bits"`
}

// chargeMemory is how long a charge is remembered for a late reset: the
// delay between a Controller's connect and the bus's event about it.
const chargeMemory = 5 * time.Minute

// outMessage is a message the gateway has decided to send and not yet
// handed to the bus.
type outMessage struct {
	Topic   string          `json:"topic"`
	Payload json.RawMessage `json:"payload"`
	// Outcome, when set, is what the sender queues once the bus has
	// answered for this message: Delivered when the bus routed or held
	// it, Undeliverable (with its audit record) when it could do neither.
	// A subscription push uses it to give the Reader one true
	// bcp_validation_result: success, or controller_unavailable.
	Outcome *outcome `json:"outcome,omitempty"`
	// Reader is set on a message to a Reader's agent: topic that went to
	// the outbox because the Reader had its list: if the Reader
	// subscribes anew before it is sent, it goes back to the parked
	// messages (readiness.go).
	Reader string `json:"reader,omitempty"`
	// Announces is set on a bcp_subscriptions_active: the Reader that
	// becomes ready when it acknowledges this message.
	Announces string `json:"announces,omitempty"`
}

// outcome holds the follow-ups of an outMessage.
type outcome struct {
	Delivered     *outMessage `json:"delivered,omitempty"`
	Undeliverable *outMessage `json:"undeliverable,omitempty"`
	// Audit is appended when the message is undeliverable.
	Audit *AuditRecord `json:"audit,omitempty"`
}

// seenRecord is the ack a handled bus message got, kept so that a
// redelivery of the same message (the gateway stopped before its ack
// reached the bus) gets the same ack and changes nothing.
type seenRecord struct {
	At        time.Time `json:"at"`
	Processed bool      `json:"processed"`
	Message   string    `json:"message"`
}

// seenMemory is how long a handled message id is remembered; the bus
// redelivers within its retry schedule (minutes).
const seenMemory = 24 * time.Hour

// AuditRecord is one entry of the audit log.
type AuditRecord struct {
	Seq            uint64       `json:"seq"`
	Time           time.Time    `json:"time"`
	Event          string       `json:"event"` // query, response, delivery, refusal, failure, reset, ...
	From           string       `json:"from,omitempty"`
	OnBehalfOf     string       `json:"on_behalf_of,omitempty"` // the human a relay (From) acted for
	Controller     string       `json:"controller,omitempty"`
	Reader         string       `json:"reader,omitempty"`
	QueryID        string       `json:"query_id,omitempty"`
	SubscriptionID string       `json:"subscription_id,omitempty"`
	Category       bcp.Category `json:"category,omitempty"`
	DeclaredBits   bcp.Bits     `json:"declared_bits,omitempty"`
	MeasuredBits   bcp.Bits     `json:"measured_bits,omitempty"`
	BudgetLeft     *bcp.Bits    `json:"budget_left,omitempty"`
	Outcome        string       `json:"outcome"` // ok, or a code
	Detail         string       `json:"detail,omitempty"`
}

// state is the gateway's bbolt file.
type state struct {
	db *bolt.DB

	// mu makes a commit and the append of its audit records to the
	// mirror one step, so the mirror keeps the log's order.
	mu     sync.Mutex
	mirror *auditMirror
	// metrics, when set, is what transactions report to once committed.
	metrics *metrics
	// readers are the Readers of the definitions by agent: topic, and
	// their bcp_subscriptions_active, encoded once: every message to
	// such a topic waits until the Reader has had its list.
	readers map[string]*readerInfo
}

func openState(dir string) (*state, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("bcp gateway: data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("bcp gateway: open %s: %w (is another gateway using this data dir?)", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("bcp gateway: init %s: %w", path, err)
	}
	if err := db.Update(migrateOutbox); err != nil {
		db.Close()
		return nil, fmt.Errorf("bcp gateway: outbox of %s: %w", path, err)
	}
	st := &state{db: db}
	if st.mirror, err = openAuditMirror(filepath.Join(dir, AuditFileName), st); err != nil {
		db.Close()
		return nil, err
	}
	return st, nil
}

func (s *state) close() error {
	err := s.db.Close()
	if merr := s.mirror.close(); err == nil {
		err = merr
	}
	return err
}

// txn is one transaction of a handler: reads, writes, the messages to
// send and the audit records, committed together.
type txn struct {
	st  *state
	tx  *bolt.Tx
	now time.Time
	// audited are the records appended, for the mirror once committed.
	audited []AuditRecord
	// after runs once the transaction committed: metrics must not count
	// a step that was rolled back.
	after []func(*metrics)
}

// onCommit runs f with the metrics after the commit, if there are metrics.
func (t *txn) onCommit(f func(*metrics)) { t.after = append(t.after, f) }

func (s *state) update(now time.Time, f func(t *txn) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t *txn
	err := s.db.Update(func(tx *bolt.Tx) error {
		t = &txn{st: s, tx: tx, now: now}
		return f(t)
	})
	if err == nil && len(t.audited) > 0 {
		// The log in the database is the record; a failed mirror write
		// is caught up at the next start.
		s.mirror.append(t.audited)
	}
	if err == nil && s.metrics != nil {
		for _, f := range t.after {
			f(s.metrics)
		}
	}
	return err
}

func (t *txn) getJSON(bucket []byte, key string, v any) (bool, error) {
	data := t.tx.Bucket(bucket).Get([]byte(key))
	if data == nil {
		return false, nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("bcp gateway: decode %s/%s: %w", bucket, key, err)
	}
	return true, nil
}

func (t *txn) putJSON(bucket []byte, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("bcp gateway: encode %s/%s: %w", bucket, key, err)
	}
	return t.tx.Bucket(bucket).Put([]byte(key), data)
}

func (t *txn) query(id string) (*queryRecord, error) {
	var q queryRecord
	ok, err := t.getJSON(bucketQueries, id, &q)
	if !ok || err != nil {
		return nil, err
	}
	return &q, nil
}

func (t *txn) putQuery(q *queryRecord) error { return t.putJSON(bucketQueries, q.ID, q) }

func channelKey(controller, reader string) string { return controller + "/" + reader }

func (t *txn) budget(controller, reader string) (*budgetRecord, error) {
	var b budgetRecord
	if _, err := t.getJSON(bucketBudgets, channelKey(controller, reader), &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// charge charges the channel's durable account, or returns the bcp
// error that refuses it; the usage after the charge is returned either
// way.
func (t *txn) charge(controller, reader string, limits bcp.BudgetLimits, c bcp.Category, bits bcp.Bits) (bcp.Usage, error) {
	rec, err := t.budget(controller, reader)
	if err != nil {
		return bcp.Usage{}, err
	}
	b := bcp.RestoreBudget(limits, rec.Usage)
	if err := b.Charge(c, bits); err != nil {
		return b.Usage(), err
	}
	rec.Usage = b.Usage()
	rec.Charges = append(pruneCharges(rec.Charges, t.now), charge{At: t.now, Category: c, Bits: bits})
	return rec.Usage, t.putJSON(bucketBudgets, channelKey(controller, reader), rec)
}

// reset empties the controller's accounts, except for charges made at or
// after since, which belong to the new session.
func (t *txn) reset(controller string, channels []bcp.Channel, since time.Time) error {
	for _, ch := range channels {
		if ch.Role != bcp.Controller {
			continue
		}
		rec, err := t.budget(controller, ch.Peer)
		if err != nil {
			return err
		}
		b := bcp.NewBudget(limitsOf(&ch))
		var kept []charge
		for _, c := range rec.Charges {
			if !c.At.Before(since) {
				// Re-charged without checks: it was allowed when made.
				_ = b.Charge(c.Category, c.Bits)
				kept = append(kept, c)
			}
		}
		rec.Usage, rec.Charges = b.Usage(), kept
		if err := t.putJSON(bucketBudgets, channelKey(controller, ch.Peer), rec); err != nil {
			return err
		}
	}
	return nil
}

func pruneCharges(cs []charge, now time.Time) []charge {
	kept := cs[:0]
	for _, c := range cs {
		if now.Sub(c.At) < chargeMemory {
			kept = append(kept, c)
		}
	}
	return kept
}

// send queues a message for the bus; the sender hands it over after the
// transaction commits.
func (t *txn) send(topic string, payload any) error {
	m, err := newOutMessage(topic, payload)
	if err != nil {
		return err
	}
	return t.queue(m)
}

// newOutMessage encodes payload as a message to topic.
func newOutMessage(topic string, payload any) (*outMessage, error) {
	data, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("bcp gateway: encode message to %s: %w", topic, err)
	}
	return &outMessage{Topic: topic, Payload: data}, nil
}

// queue appends m to the outbox, or parks it when it is for a Reader
// that has not had its list since it last subscribed.
func (t *txn) queue(m *outMessage) error {
	if park, err := t.mustPark(m); park || err != nil {
		return err
	}
	return t.enqueue(m)
}

// enqueue appends m to the outbox, at the end of its topic's queue.
func (t *txn) enqueue(m *outMessage) error {
	b := t.tx.Bucket(bucketOutbox)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	return t.putJSON(bucketOutbox, outboxKey(m.Topic, seq), m)
}

// outboxKey keys a message by its topic, then its sequence, so that each
// topic's messages form a queue of their own, in order. A topic holds no
// NUL byte (protocol.ValidateTopic refuses control characters).
func outboxKey(topic string, seq uint64) string { return topic + "\x00" + seqKey(seq) }

// migrateOutbox re-keys messages a gateway of an earlier version queued
// under their sequence alone (8 bytes, shorter than any new key), keeping
// their order.
func migrateOutbox(tx *bolt.Tx) error {
	b := tx.Bucket(bucketOutbox)
	var keys, values [][]byte
	err := b.ForEach(func(k, v []byte) error {
		if len(k) == 8 {
			keys, values = append(keys, append([]byte(nil), k...)), append(values, append([]byte(nil), v...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, k := range keys {
		var m outMessage
		if err := json.Unmarshal(values[i], &m); err != nil {
			return fmt.Errorf("queued message %d: %w", binary.BigEndian.Uint64(k), err)
		}
		if err := b.Delete(k); err != nil {
			return err
		}
		if err := b.Put([]byte(outboxKey(m.Topic, binary.BigEndian.Uint64(k))), values[i]); err != nil {
			return err
		}
	}
	return nil
}

// audit appends a record to the audit log.
func (t *txn) audit(r AuditRecord) error {
	b := t.tx.Bucket(bucketAudit)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	r.Seq, r.Time = seq, t.now
	t.audited = append(t.audited, r)
	return t.putJSON(bucketAudit, seqKey(seq), r)
}

func (t *txn) seen(messageID string) (*seenRecord, error) {
	if messageID == "" {
		return nil, nil
	}
	var r seenRecord
	ok, err := t.getJSON(bucketSeen, messageID, &r)
	if !ok || err != nil {
		return nil, err
	}
	return &r, nil
}

func (t *txn) markSeen(messageID string, processed bool, message string) error {
	if messageID == "" {
		return nil
	}
	return t.putJSON(bucketSeen, messageID, seenRecord{At: t.now, Processed: processed, Message: message})
}

// seqKey is a sequence as a big-endian key, so that keys sort in order.
func seqKey(seq uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return string(b[:])
}

// nextOutbox returns the oldest message queued for topic and its key, or
// ok false.
func (s *state) nextOutbox(topic string) (key []byte, m outMessage, ok bool, err error) {
	prefix := []byte(topic + "\x00")
	err = s.db.View(func(tx *bolt.Tx) error {
		k, v := tx.Bucket(bucketOutbox).Cursor().Seek(prefix)
		if k == nil || !bytes.HasPrefix(k, prefix) {
			return nil
		}
		key, ok = append([]byte(nil), k...), true
		return json.Unmarshal(v, &m)
	})
	return key, m, ok, err
}

// outboxTopics returns the topics that have messages queued, skipping
// from one topic's queue to the next.
func (s *state) outboxTopics() ([]string, error) {
	var topics []string
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketOutbox).Cursor()
		for k, _ := c.First(); k != nil; {
			topic, _, ok := bytes.Cut(k, []byte{0})
			if !ok {
				return fmt.Errorf("bcp gateway: outbox key %q has no topic", k)
			}
			topics = append(topics, string(topic))
			// The first key after every key of this topic.
			k, _ = c.Seek(append(append([]byte(nil), topic...), 1))
		}
		return nil
	})
	return topics, err
}

// finishOutbox dequeues the message at key and, in the same transaction,
// queues its follow-up for the bus's answer (outMessage.Outcome): a crash
// between the two can neither lose the follow-up nor send it twice.
// The bus's answer res also tells whether a Reader got its message
// (readiness.go).
func (s *state) finishOutbox(now time.Time, key []byte, m *outMessage, res *protocol.SendMessageResult, delivered bool) error {
	return s.update(now, func(t *txn) error {
		if err := t.tx.Bucket(bucketOutbox).Delete(key); err != nil {
			return err
		}
		if err := t.afterSend(m, res); err != nil {
			return err
		}
		if m.Outcome == nil {
			return nil
		}
		if delivered {
			if m.Outcome.Delivered != nil {
				return t.queue(m.Outcome.Delivered)
			}
			return nil
		}
		if m.Outcome.Audit != nil {
			if err := t.audit(*m.Outcome.Audit); err != nil {
				return err
			}
		}
		if m.Outcome.Undeliverable != nil {
			return t.queue(m.Outcome.Undeliverable)
		}
		return nil
	})
}

// Audit returns the audit log from sequence after (exclusive), in order.
func (s *state) auditLog(after uint64) ([]AuditRecord, error) {
	var out []AuditRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Seek([]byte(seqKey(after + 1))); k != nil; k, v = c.Next() {
			var r AuditRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("bcp gateway: audit record %d: %w", binary.BigEndian.Uint64(k), err)
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// pendingQueries returns the queries still waiting for an answer.
func (s *state) pendingQueries() ([]*queryRecord, error) {
	var out []*queryRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketQueries).ForEach(func(k, v []byte) error {
			var q queryRecord
			if err := json.Unmarshal(v, &q); err != nil {
				return fmt.Errorf("bcp gateway: query %q: %w", k, err)
			}
			if q.State == statePending {
				out = append(out, &q)
			}
			return nil
		})
	})
	return out, err
}

// pruneSeen forgets handled message ids older than seenMemory.
func (s *state) pruneSeen(now time.Time) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSeen)
		var old [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var r seenRecord
			if json.Unmarshal(v, &r) != nil || now.Sub(r.At) > seenMemory {
				old = append(old, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func limitsOf(ch *bcp.Channel) bcp.BudgetLimits {
	return bcp.BudgetLimits{MaxCategory: ch.MaxCategory, Bits: ch.BudgetBits, MaxCat2Queries: ch.MaxCat2Queries, MaxCat3Queries: ch.MaxCat3Queries}
}

// pushWindow is the sliding window of max_pushes_per_hour.
const pushWindow = time.Hour

// recentPushes returns the accepted publishes of a subscription within
// the last hour.
func (t *txn) recentPushes(reader, controller, id string) ([]time.Time, error) {
	var all []time.Time
	if _, err := t.getJSON(bucketPushes, reader+"/"+controller+"/"+id, &all); err != nil {
		return nil, err
	}
	recent := all[:0]
	for _, at := range all {
		if t.now.Sub(at) < pushWindow {
			recent = append(recent, at)
		}
	}
	return recent, nil
}

// recordPush counts an accepted publish against its subscription's rate.
func (t *txn) recordPush(reader, controller, id string) error {
	recent, err := t.recentPushes(reader, controller, id)
	if err != nil {
		return err
	}
	return t.putJSON(bucketPushes, reader+"/"+controller+"/"+id, append(recent, t.now))
}
