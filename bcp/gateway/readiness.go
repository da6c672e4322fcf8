package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// A Reader hears bcp_subscriptions_active each time it subscribes to its
// agent: topic, before anything else the gateway sends it. The bus alone
// cannot keep that order: messages it held for an absent Reader are
// routed the moment the Reader subscribes, before the gateway has even
// heard of the subscription (system:client.subscribed). So the gateway
// does not let the bus hold its messages for a Reader. A Reader is
// "ready" once it has acknowledged the list sent for its latest
// subscription; until then every message for it is parked in the state
// file, in order, and moved to the outbox, behind the list, the moment
// the Reader acknowledges the list.
//
//   - A subscription (system:client.subscribed for agent:{reader}) makes
//     the Reader not ready: its messages still in the outbox go back to
//     the parked ones, and a list is queued.
//   - A message for a Reader that the bus held, or could not hand to the
//     Reader, makes it not ready too: it is gone.
//   - A message parked for a Reader that is not ready and not being
//     announced to queues a list as a wake-up call: if the Reader is
//     connected it acknowledges it and becomes ready; if not, the bus
//     holds the list (and a spawner may start the Reader), which is
//     harmless, since the list is what must come first.
//   - A gateway that (re)connects cannot know what it missed, so every
//     Reader is announced to again (announceSubscriptions).
//
// What remains is one message in flight at the moment a Reader
// resubscribes, handed to the bus before the gateway heard of the
// subscription; the Go SDK's Reader (bcp/agent) asks the bus to retry any
// message that comes before its first list (docs/BCP.md, "Known
// limitations").

// readerInfo is what the state knows of a Reader of the definitions.
type readerInfo struct {
	name string
	// list is its bcp_subscriptions_active, encoded.
	list json.RawMessage
}

// readerRecord is a Reader's readiness, kept in bucketReaders.
type readerRecord struct {
	// Ready means the Reader acknowledged the list sent for its latest
	// subscription: messages for it go straight to the outbox.
	Ready bool `json:"ready"`
	// Announcing means a list is on its way (in the outbox, or held by
	// the bus), so parking a message needs no wake-up call.
	Announcing bool `json:"announcing,omitempty"`
}

func (t *txn) reader(name string) (*readerRecord, error) {
	var r readerRecord
	_, err := t.getJSON(bucketReaders, name, &r)
	return &r, err
}

func (t *txn) putReader(name string, r *readerRecord) error {
	return t.putJSON(bucketReaders, name, r)
}

// mustPark parks m when it is for a Reader that is not ready, and says
// whether it did. A message for a ready Reader is marked with it.
func (t *txn) mustPark(m *outMessage) (bool, error) {
	info := t.st.readers[m.Topic]
	if info == nil || m.Announces != "" {
		return false, nil
	}
	r, err := t.reader(info.name)
	if err != nil {
		return false, err
	}
	if r.Ready {
		m.Reader = info.name
		return false, nil
	}
	if err := t.park(info.name, m); err != nil {
		return false, err
	}
	if r.Announcing {
		return true, nil
	}
	return true, t.announce(info.name, "wake-up: messages are waiting")
}

// park appends m to the Reader's parked messages.
func (t *txn) park(reader string, m *outMessage) error {
	seq, err := t.tx.Bucket(bucketParked).NextSequence()
	if err != nil {
		return err
	}
	m.Reader = ""
	return t.putJSON(bucketParked, reader+"\x00"+seqKey(seq), m)
}

// announce queues reader's bcp_subscriptions_active and audits it.
func (t *txn) announce(reader, why string) error {
	info := t.st.readers[peer.AgentTopic(reader)]
	if info == nil {
		return fmt.Errorf("bcp gateway: %s is not a Reader of the definitions", reader)
	}
	r, err := t.reader(reader)
	if err != nil {
		return err
	}
	r.Announcing = true
	if err := t.putReader(reader, r); err != nil {
		return err
	}
	if err := t.enqueue(&outMessage{Topic: peer.AgentTopic(reader), Payload: info.list, Announces: reader}); err != nil {
		return err
	}
	return t.audit(AuditRecord{Event: "subscriptions_active", Reader: reader, Outcome: "ok", Detail: why})
}

// unready makes reader not ready: what the outbox holds for it goes back,
// in order, to its parked messages, to follow the next list.
func (t *txn) unready(reader string) error {
	r, err := t.reader(reader)
	if err != nil {
		return err
	}
	r.Ready = false
	if err := t.putReader(reader, r); err != nil {
		return err
	}
	b := t.tx.Bucket(bucketOutbox)
	var keys [][]byte
	var msgs []*outMessage
	err = b.ForEach(func(k, v []byte) error {
		var m outMessage
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("bcp gateway: outbox message: %w", err)
		}
		if m.Reader == reader {
			keys, msgs = append(keys, append([]byte(nil), k...)), append(msgs, &m)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
		if err := t.park(reader, msgs[i]); err != nil {
			return err
		}
	}
	return nil
}

// ready makes reader ready and moves its parked messages to the outbox,
// in order, except queries that closed while they waited.
func (t *txn) ready(reader string) error {
	if err := t.putReader(reader, &readerRecord{Ready: true}); err != nil {
		return err
	}
	b := t.tx.Bucket(bucketParked)
	prefix := []byte(reader + "\x00")
	var keys [][]byte
	var msgs []*outMessage
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, v = c.Next() {
		var m outMessage
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("bcp gateway: parked message: %w", err)
		}
		keys, msgs = append(keys, append([]byte(nil), k...)), append(msgs, &m)
	}
	for i, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
		if stale, err := t.closedQuery(msgs[i]); stale || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		msgs[i].Reader = reader
		if err := t.enqueue(msgs[i]); err != nil {
			return err
		}
	}
	return nil
}

// closedQuery reports whether m is a bcp_query whose query is no longer
// waiting for an answer (it expired while the Reader was away): the
// Reader has nothing to answer.
func (t *txn) closedQuery(m *outMessage) (bool, error) {
	var q struct {
		Type    string `json:"type"`
		QueryID string `json:"query_id"`
	}
	if json.Unmarshal(m.Payload, &q) != nil || q.Type != TypeQuery {
		return false, nil
	}
	rec, err := t.query(q.QueryID)
	if err != nil || rec == nil {
		return rec == nil && err == nil, err
	}
	return rec.State != statePending, nil
}

// afterSend updates the readiness of the Reader m was for, from the bus's
// answer: a list the Reader acknowledged makes it ready; any message that
// did not reach it (held, retrying, refused) makes it not ready.
func (t *txn) afterSend(m *outMessage, res *protocol.SendMessageResult) error {
	reader := m.Announces
	if reader == "" {
		reader = m.Reader
	}
	if reader == "" {
		return nil
	}
	reached := false
	for _, a := range res.Acks {
		if a.ClientID == reader && a.Error == "" && !a.Retrying {
			reached = true
		}
	}
	if reached && m.Announces != "" {
		return t.ready(reader)
	}
	if reached {
		return nil
	}
	if err := t.unready(reader); err != nil {
		return err
	}
	r, err := t.reader(reader)
	if err != nil {
		return err
	}
	// Something held or retried by the bus wakes the Reader (or a
	// spawner) by itself; otherwise the next parked message sends a
	// wake-up call.
	r.Announcing = res.Held || anyRetrying(res.Acks)
	return t.putReader(reader, r)
}

func anyRetrying(acks []protocol.Ack) bool {
	for _, a := range acks {
		if a.Retrying {
			return true
		}
	}
	return false
}

// hasParked reports whether messages are parked for reader.
func (t *txn) hasParked(reader string) bool {
	k, _ := t.tx.Bucket(bucketParked).Cursor().Seek([]byte(reader + "\x00"))
	return k != nil && strings.HasPrefix(string(k), reader+"\x00")
}
