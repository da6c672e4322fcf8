package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"
)

// recordVersion is the version written into every record as "v". A record
// without it, or with a newer one, is refused when read. Version 2
// records carry a checksum (seal); version 1 records, written before
// checksums, have none, and are read as they are.
const recordVersion = 2

// A record of version 2 ends in its checksum: the last member of its JSON
// object is "crc32c", 8 lowercase hex digits of the CRC-32C (Castagnoli)
// of the record's bytes without that member. A byte changed anywhere in
// the record, by a bad disk or a stray write, changes the sum; bbolt
// checksums its meta pages only. The record stays JSON, so the bbolt
// command still shows it, and the sum sits at the end at a fixed length,
// so it is found and checked without parsing the record.
const (
	sumMember = `,"crc32c":"`
	sumDigits = 8
	sumLen    = len(sumMember) + sumDigits + len(`"}`)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// seal appends the checksum to body, a JSON object with at least one
// member, in place of its closing brace.
func seal(body []byte) []byte {
	sum := crc32.Checksum(body, castagnoli)
	b := append(body[:len(body)-1], sumMember...)
	var digits [sumDigits]byte
	hex := strconv.AppendUint(digits[:0], uint64(sum), 16)
	for range sumDigits - len(hex) {
		b = append(b, '0')
	}
	b = append(b, hex...)
	return append(b, `"}`...)
}

// errChecksum is the error of a record whose checksum does not match.
var errChecksum = errors.New("the record fails its CRC-32C checksum: it changed after it was written")

// unseal checks v's checksum and reports whether v carries one: false,
// and no error, for a record without (version 1, or one damaged where the
// checksum sits, which its version then refuses); errChecksum for one
// whose sum does not match.
func unseal(v []byte) (sealed bool, err error) {
	n := len(v) - sumLen
	if n < 1 || !bytes.Equal(v[n:n+len(sumMember)], []byte(sumMember)) || !bytes.HasSuffix(v, []byte(`"}`)) {
		return false, nil
	}
	var want uint32
	for _, c := range v[n+len(sumMember) : len(v)-2] {
		switch {
		case '0' <= c && c <= '9':
			want = want<<4 | uint32(c-'0')
		case 'a' <= c && c <= 'f':
			want = want<<4 | uint32(c-'a'+10)
		default:
			return false, nil
		}
	}
	if crc32.Update(crc32.Checksum(v[:n], castagnoli), castagnoli, []byte{'}'}) != want {
		return true, errChecksum
	}
	return true, nil
}

// Message is the published message a pending delivery or a dead letter
// carries, kept as the publisher sent it.
type Message struct {
	ID    string `json:"id"`    // the messageId the bus gave it
	Topic string `json:"topic"` // the topic it was published to
	From  string `json:"from,omitempty"`
	// Publisher is the identity whose publish the message is: whom its
	// pending entries count against (the bus's per-identity cap). Records
	// written before it existed lack it; From stands in for them.
	Publisher string `json:"publisher,omitempty"`
	// Payload and Meta are kept byte for byte, except that JSON
	// whitespace is removed; each must be valid JSON or empty.
	Payload     json.RawMessage `json:"payload,omitempty"`
	Meta        json.RawMessage `json:"meta,omitempty"`
	PublishedAt time.Time       `json:"publishedAt,omitzero"`
}

// Attempt is one delivery attempt. Error is empty when the subscriber
// answered and asked for a retry; otherwise it says what went wrong: the
// subscriber's message or reason, a timeout, a dropped connection.
type Attempt struct {
	At    time.Time `json:"at"`
	Error string    `json:"error,omitempty"`
}

// checkMessage checks that the payload and the meta, if any, are JSON, so
// that a record that was written can be read back.
func checkMessage(m *Message) error {
	switch {
	case len(m.Payload) > 0 && !json.Valid(m.Payload):
		return fmt.Errorf("%w: message %s: payload is not valid JSON", ErrInvalid, m.ID)
	case len(m.Meta) > 0 && !json.Valid(m.Meta):
		return fmt.Errorf("%w: message %s: meta is not valid JSON", ErrInvalid, m.ID)
	}
	return nil
}

// bucket names a bbolt bucket, or a map of the memory store.
type bucket string

const (
	bucketMeta        bucket = "meta"        // "version" → the store format
	bucketPending     bucket = "pending"     // big-endian sequence → pending record
	bucketDeadLetters bucket = "deadletters" // big-endian sequence → dead-letter record
)

// Ids are a prefix and a sequence number from the bucket's NextSequence,
// zero-padded to idDigits so that ids sort as strings in the order they
// were assigned. Parsing accepts any number of digits: "d-42" is
// "d-000000000042".
const (
	idDigits          = 12
	pendingPrefix     = "p-"
	deadLetterPrefix  = "d-"
	maxSequenceDigits = 20 // len("18446744073709551615")
)

// FormatID is fmt.Sprintf("%s%0*d", prefix, 12, seq) without fmt's
// reflection: it runs for every record written. The cluster's store
// makes its ids with it too, so that they look and sort as these do.
func FormatID(prefix string, seq uint64) string {
	var buf [32]byte // room for a prefix and maxSequenceDigits
	b := append(buf[:0], prefix...)
	var digits [maxSequenceDigits]byte
	d := strconv.AppendUint(digits[:0], seq, 10)
	for range idDigits - len(d) {
		b = append(b, '0')
	}
	return string(append(b, d...))
}

// ParseID returns the sequence number of an id with the prefix, or an
// error wrapping ErrInvalid.
func ParseID(prefix, id string) (uint64, error) {
	digits, ok := strings.CutPrefix(id, prefix)
	if !ok || digits == "" || len(digits) > maxSequenceDigits || strings.Trim(digits, "0123456789") != "" {
		return 0, fmt.Errorf("%w: malformed id %q, want %s<number>", ErrInvalid, id, prefix)
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("%w: malformed id %q, want %s<number>", ErrInvalid, id, prefix)
	}
	return seq, nil
}

// key is the bucket key of a sequence number: big-endian, so that keys
// sort in the order they were assigned.
func key(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

// keyID returns the id for a bucket key, for naming a record in an error.
func keyID(prefix string, k []byte) string {
	if len(k) != 8 {
		return fmt.Sprintf("%s(key %x)", prefix, k)
	}
	return FormatID(prefix, binary.BigEndian.Uint64(k))
}

type pendingRecord struct {
	Version int `json:"v"`
	Pending
}

// scheduleRecord is a pendingRecord read without the message's payload
// and meta: its Message field hides the embedded one from encoding/json.
type scheduleRecord struct {
	pendingRecord
	Message struct {
		Message
		// Hide Message's own, so that the bytes are skipped, not copied.
		Payload skipped `json:"payload"`
		Meta    skipped `json:"meta"`
	} `json:"message"`
}

// skipped takes any JSON value and keeps nothing of it. encoding/json
// has checked that the whole record is valid JSON before it calls
// UnmarshalJSON, so the payload is too.
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

type deadLetterRecord struct {
	Version int `json:"v"`
	DeadLetter
}

// EncodeDeadLetter returns the stored form of d, as is: PrepareDeadLetter
// makes what it is given.
func EncodeDeadLetter(d *DeadLetter) ([]byte, error) {
	b, err := encode(deadLetterRecord{Version: recordVersion, DeadLetter: *d})
	if err != nil {
		return nil, err
	}
	return seal(b), nil
}

// encode is json.Marshal without its escaping of <, > and &, so that
// payloads come back as they went in.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// record is a versioned record as stored.
type record interface {
	// header returns the record's version and id.
	header() (version int, id string)
	// check applies the rules that the fields of a record must meet.
	check() error
}

func (r *pendingRecord) header() (int, string) { return r.Version, r.ID }
func (r *pendingRecord) check() error          { return checkPending(&r.Pending) }
func (r *scheduleRecord) check() error {
	p := r.Pending
	p.Message = r.Message.Message
	return checkPending(&p)
}
func (r *deadLetterRecord) header() (int, string) { return r.Version, r.ID }
func (r *deadLetterRecord) check() error          { return checkReason(r.Reason) }

// DecodePending decodes a pending record written by EncodePending and
// checks it: its version, that its id is id, and its fields.
func DecodePending(id string, v []byte) (*Pending, error) {
	var r pendingRecord
	if err := decodeRecord(id, v, &r); err != nil {
		return nil, fmt.Errorf("decode pending record %s: %w", id, err)
	}
	return &r.Pending, nil
}

// DecodeSchedule decodes a pending record as DecodePending does, but
// without the message's Payload and Meta, which are skipped, not copied:
// what PendingSchedule returns.
func DecodeSchedule(id string, v []byte) (*Pending, error) {
	var r scheduleRecord
	if err := decodeRecord(id, v, &r); err != nil {
		return nil, fmt.Errorf("decode pending record %s: %w", id, err)
	}
	p := r.Pending
	p.Message = r.Message.Message
	return &p, nil
}

// DecodeDeadLetter decodes a dead-letter record written by
// EncodeDeadLetter and checks it: its version, that its id is id, and
// its reason.
func DecodeDeadLetter(id string, v []byte) (*DeadLetter, error) {
	var r deadLetterRecord
	if err := decodeRecord(id, v, &r); err != nil {
		return nil, fmt.Errorf("decode dead-letter record %s: %w", id, err)
	}
	return &r.DeadLetter, nil
}

// decodePending decodes the value stored under k in the pending bucket.
func decodePending(k, v []byte) (*Pending, error) {
	var r pendingRecord
	if err := decode(bucketPending, pendingPrefix, k, v, &r); err != nil {
		return nil, err
	}
	return &r.Pending, nil
}

// decodeDeadLetter decodes the value stored under k in the dead-letter
// bucket.
func decodeDeadLetter(k, v []byte) (*DeadLetter, error) {
	var r deadLetterRecord
	if err := decode(bucketDeadLetters, deadLetterPrefix, k, v, &r); err != nil {
		return nil, err
	}
	return &r.DeadLetter, nil
}

// decode decodes v, stored under k in bucket b, into r and checks it: its
// checksum, its version, that its id is the key's, and its fields. Errors
// name the bucket and the key.
func decode(b bucket, prefix string, k, v []byte, r record) error {
	if err := decodeRecord(keyID(prefix, k), v, r); err != nil {
		return fmt.Errorf("decode %s record %s: %w", b, keyID(prefix, k), err)
	}
	return nil
}

// decodeRecord decodes v into r and checks it: its checksum, its version,
// that its id is want, and its fields. Its errors wrap ErrDamaged and
// never quote v.
func decodeRecord(want string, v []byte, r record) error {
	if err := checkRecord(want, v, r); err != nil {
		return fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	return nil
}

func checkRecord(want string, v []byte, r record) error {
	sealed, err := unseal(v)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(v, r); err != nil {
		if syntax, ok := errors.AsType[*json.SyntaxError](err); ok {
			return fmt.Errorf("not valid JSON at byte %d of %d", syntax.Offset, len(v))
		}
		return err
	}
	switch version, id := r.header(); {
	case version < 1:
		return fmt.Errorf("record has no version")
	case version > recordVersion:
		return fmt.Errorf("record version %d is newer than this program reads (%d)", version, recordVersion)
	case version >= 2 && !sealed:
		return fmt.Errorf("record of version %d has no checksum, or a damaged one", version)
	case id != want:
		return fmt.Errorf("record has id %q", id)
	}
	return r.check()
}
