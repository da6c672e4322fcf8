package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// A pending record is written on the path of every stored retry and
// hold, so it is encoded by hand rather than by encoding/json, whose
// reflection and two passes over the payload (json.Valid in the check,
// then the compaction of a json.RawMessage) were most of the store's CPU
// per record besides the commit itself. The bytes are exactly those
// encoding/json writes for a pendingRecord with HTML escaping off
// (FuzzEncodePending holds the two to that), checksum included.

// EncodePending checks p's kind's rules and returns the stored form of
// p; errors wrap ErrInvalid.
func EncodePending(p *Pending) ([]byte, error) {
	if err := checkKind(p); err != nil {
		return nil, err
	}
	return encodePending(p)
}

// encodePending returns the stored form of p and checks p's payload and
// meta on the way: each is copied once, by json.Compact, which is also
// the check that it is JSON.
func encodePending(p *Pending) ([]byte, error) {
	body, err := encodePendingBody(p)
	if err != nil {
		return nil, err
	}
	return sealPending(p.ID, body), nil
}

// sealPending returns the stored form of the pending entry id whose
// members after the id are body (encodePendingBody): the part of the
// encoding that needs the id, which a new entry gets only in the
// transaction that stores it, and the checksum over all of it.
func sealPending(id string, body []byte) []byte {
	b := make([]byte, 0, 32+len(id)+len(body)+sumLen)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, recordVersion, 10)
	b = appendString(append(b, `,"id":`...), id)
	return seal(append(b, body...))
}

// encodePendingBody encodes the members of p's stored form after its id,
// closing brace included, unsealed: all of the encoding's work (the
// payload's copy and check among it) that needs no transaction, so that
// a writer does it before it queues (commit.go).
func encodePendingBody(p *Pending) ([]byte, error) {
	m := &p.Message
	// Room for the fields around the payload, so that it is copied once.
	b := make([]byte, 0, 352+len(m.Payload)+len(m.Meta)+96*len(p.Attempts))
	b = appendString(append(b, `,"kind":`...), p.Kind)
	b = appendString(append(b, `,"message":{"id":`...), m.ID)
	b = appendString(append(b, `,"topic":`...), m.Topic)
	b = appendOptional(b, `,"from":`, m.From)
	b = appendOptional(b, `,"publisher":`, m.Publisher)
	var err error
	if len(m.Payload) > 0 {
		if b, err = appendCompact(append(b, `,"payload":`...), m.Payload); err != nil {
			return nil, fmt.Errorf("%w: message %s: payload is not valid JSON", ErrInvalid, m.ID)
		}
	}
	if len(m.Meta) > 0 {
		if b, err = appendCompact(append(b, `,"meta":`...), m.Meta); err != nil {
			return nil, fmt.Errorf("%w: message %s: meta is not valid JSON", ErrInvalid, m.ID)
		}
	}
	if !m.PublishedAt.IsZero() {
		if b, err = appendTime(append(b, `,"publishedAt":`...), m.PublishedAt); err != nil {
			return nil, err
		}
	}
	b = append(b, '}')
	b = appendOptional(b, `,"clientId":`, p.ClientID)
	b = appendOptional(b, `,"subscription":`, p.Subscription)
	b = appendOptional(b, `,"subscriber":`, p.Subscriber)
	if len(p.Attempts) > 0 {
		b = append(b, `,"attempts":[`...)
		for i, a := range p.Attempts {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendTime(append(b, `{"at":`...), a.At); err != nil {
				return nil, err
			}
			b = append(appendOptional(b, `,"error":`, a.Error), '}')
		}
		b = append(b, ']')
	}
	if b, err = appendTime(append(b, `,"nextAt":`...), p.NextAt); err != nil {
		return nil, err
	}
	b = appendOptional(b, `,"askedBy":`, p.AskedBy)
	return append(b, '}'), nil
}

// appendOptional appends the field name and s, unless s is empty: a
// string field tagged omitempty.
func appendOptional(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(append(b, name...), s)
}

// appendString appends s as a JSON string. Ids, topics and client ids
// are plain ASCII and are copied as they are; a string with anything
// encoding/json would escape goes through encoding/json, so the two
// agree on every escape.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, err := encode(s)
			if err != nil {
				// encoding/json encodes every string; unreachable.
				panic(fmt.Sprintf("encode string %q: %v", s, err))
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendCompact appends the JSON value v without its insignificant
// whitespace, as encoding/json writes a json.RawMessage, or fails when v
// is not JSON.
func appendCompact(b []byte, v json.RawMessage) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// appendTime appends t as encoding/json writes a time.Time, with the same
// refusal of years it cannot write.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	b, err := t.AppendText(append(b, '"'))
	if err != nil {
		return nil, fmt.Errorf("encode time: %w", err)
	}
	return append(b, '"'), nil
}
