package cluster

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/bub-bus/bub/bus"
)

// Delivery is a message for a subscriber on another node: who it is for
// and the raw message bytes, passed through untouched. The frame carries
// all but Deadline, which travels in a header (deliver.go), and the
// callbacks, which stay on their side.
type Delivery = bus.RemoteDelivery

// frameVersion leads every delivery request, so that a later format can
// be told apart from this one during a rolling upgrade.
const frameVersion = 1

// appendDelivery frames d after dst: the version byte, the clientId and
// pattern as uvarint-length-prefixed strings, conn and attempt as
// uvarints, then the payload to the end. A binary header keeps the
// payload out of any re-encoding: it is copied once, into the request.
func appendDelivery(dst []byte, d *Delivery) []byte {
	dst = append(dst, frameVersion)
	dst = binary.AppendUvarint(dst, uint64(len(d.ClientID)))
	dst = append(dst, d.ClientID...)
	dst = binary.AppendUvarint(dst, d.Conn)
	dst = binary.AppendUvarint(dst, uint64(len(d.Pattern)))
	dst = append(dst, d.Pattern...)
	dst = binary.AppendUvarint(dst, uint64(d.Attempt))
	return append(dst, d.Payload...)
}

// parseDelivery reads a frame written by appendDelivery. The payload
// aliases b.
func parseDelivery(b []byte) (*Delivery, error) {
	if len(b) == 0 || b[0] != frameVersion {
		return nil, fmt.Errorf("%w: not a version %d delivery", ErrBadFrame, frameVersion)
	}
	r := frameReader{b: b[1:]}
	d := &Delivery{
		ClientID: r.string("clientId"),
		Conn:     r.uvarint("conn"),
		Pattern:  r.string("pattern"),
	}
	attempt := r.uvarint("attempt")
	if r.err != nil {
		return nil, r.err
	}
	if attempt > 1<<32-1 {
		return nil, fmt.Errorf("%w: attempt %d out of range", ErrBadFrame, attempt)
	}
	if !utf8.Valid(r.b) {
		// The node writes the payload to its subscriber as it is, as
		// a text message; a node that read it from a peer checked it,
		// but one of another version, or anything else on the subject,
		// may not have.
		return nil, fmt.Errorf("%w: payload is not valid UTF-8", ErrBadFrame)
	}
	d.Attempt = uint32(attempt)
	d.Payload = r.b
	return d, nil
}

// frameReader reads a frame's fields in turn; the first error sticks and
// names the field.
type frameReader struct {
	b   []byte
	err error
}

func (r *frameReader) uvarint(field string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad %s", ErrBadFrame, field)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *frameReader) string(field string) string {
	n := r.uvarint(field + " length")
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: %s length %d exceeds the %d bytes left", ErrBadFrame, field, n, len(r.b))
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// Response frames lead with a status byte: the handler's result follows
// responseOK, its error text responseError.
const (
	responseOK    byte = 0
	responseError byte = 1
)
