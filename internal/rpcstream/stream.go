// Package rpcstream carries JSON-RPC 2.0 over a WebSocket connection for
// sourcegraph/jsonrpc2: one JSON-RPC object, or one batch, per text
// message.
//
// jsonrpc2 on its own closes the connection on unparsable JSON and on
// batches, cannot echo every id JSON-RPC allows, and answers nothing for
// a message that is neither request nor response. The Stream sits in
// front of it and answers those cases itself, as JSON-RPC 2.0 requires:
// invalid JSON gets -32700 with a null id, a value that is not a request
// gets -32600, a batch is split for jsonrpc2 and its responses are joined
// into one array, and every request id is echoed byte for byte. The
// connection stays open through all of it.
//
// To echo ids exactly, the Stream hands jsonrpc2 each request under a
// synthetic id of its own and restores the caller's id when the response
// is written. A handler must therefore answer each request exactly once,
// and never answer a notification.
package rpcstream

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/protocol"
)

// Stream is a jsonrpc2.ObjectStream over a WebSocket connection.
//
// ReadObject must be called from one goroutine at a time (jsonrpc2's read
// loop); WriteObject may be called concurrently.
type Stream struct {
	ws           *websocket.Conn
	writeTimeout time.Duration

	// queue holds messages split from a batch, waiting for ReadObject;
	// only the reading goroutine touches it.
	queue [][]byte

	// mu guards pending and nextID.
	mu      sync.Mutex
	pending map[string]*pendingReply
	nextID  uint64
}

// pendingReply remembers a request handed to jsonrpc2 under a synthetic id.
type pendingReply struct {
	id    json.RawMessage // the caller's id, as sent
	batch *batch          // nil when the request came on its own
}

// batch collects the responses to one batch; guarded by Stream.mu.
type batch struct {
	replies [][]byte
	waiting int
}

// New returns a Stream over ws. Every write must finish within
// writeTimeout, else the connection is closed: a peer that does not read
// is dropped rather than allowed to stall its senders.
func New(ws *websocket.Conn, writeTimeout time.Duration) *Stream {
	return &Stream{ws: ws, writeTimeout: writeTimeout, pending: make(map[string]*pendingReply)}
}

// syntheticPrefix starts every id the Stream hands to jsonrpc2. The
// Stream's own calls use numeric ids, so the two never meet.
const syntheticPrefix = "~r"

// ReadObject reads the next JSON-RPC request or response into v, answering
// malformed input itself and reading on.
func (s *Stream) ReadObject(v any) error {
	for {
		for len(s.queue) > 0 {
			msg := s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
			// The Stream checked the message's shape, so jsonrpc2 can
			// only refuse a response whose id it cannot represent; such
			// a response answers no call of ours and is dropped.
			if err := json.Unmarshal(msg, v); err == nil {
				return nil
			}
		}
		typ, data, err := s.ws.Read(context.Background())
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			s.reply(errorReply(nil, protocol.CodeInvalidRequest, "invalid request: binary messages are not accepted; send JSON-RPC as text"))
			continue
		}
		s.accept(data)
	}
}

// accept checks one WebSocket message, queueing what jsonrpc2 should see
// and answering the rest.
func (s *Stream) accept(data []byte) {
	if !json.Valid(data) {
		s.reply(errorReply(nil, protocol.CodeParseError, "parse error: the message is not valid JSON"))
		return
	}
	if first := firstByte(data); first != '[' {
		if msg, reply := s.prepare(data, nil); reply != nil {
			s.reply(reply)
		} else if msg != nil {
			s.queue = append(s.queue, msg)
		}
		return
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(data, &elems); err != nil {
		s.reply(errorReply(nil, protocol.CodeParseError, "parse error: "+err.Error()))
		return
	}
	if len(elems) == 0 {
		s.reply(errorReply(nil, protocol.CodeInvalidRequest, "invalid request: empty batch"))
		return
	}
	b := &batch{}
	s.mu.Lock()
	for _, elem := range elems {
		msg, reply := s.prepareLocked(elem, b)
		if reply != nil {
			b.replies = append(b.replies, reply)
		}
		if msg != nil {
			s.queue = append(s.queue, msg)
		}
	}
	done := b.waiting == 0
	s.mu.Unlock()
	// Requests in the batch are answered as jsonrpc2 handles them; when
	// there are none, what the batch gets is known now: error replies,
	// or nothing at all for a batch of notifications.
	if done && len(b.replies) > 0 {
		s.reply(joinBatch(b.replies))
	}
}

func (s *Stream) prepare(raw json.RawMessage, b *batch) (msg, reply []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prepareLocked(raw, b)
}

// envelope is the shape every JSON-RPC message is checked against. Absent
// members stay nil; a JSON null becomes the bytes "null".
type envelope struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// prepareLocked checks one JSON-RPC message (raw is valid JSON). It returns
// the bytes jsonrpc2 should read, or the error reply the sender gets, or
// neither for a response that answers nothing of ours.
func (s *Stream) prepareLocked(raw json.RawMessage, b *batch) (msg, reply []byte) {
	if firstByte(raw) != '{' {
		return nil, errorReply(nil, protocol.CodeInvalidRequest, "invalid request: a JSON-RPC message must be an object")
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, errorReply(nil, protocol.CodeInvalidRequest, "invalid request: "+err.Error())
	}
	id := env.ID
	if id != nil && !validID(id) {
		return nil, errorReply(nil, protocol.CodeInvalidRequest, "invalid request: id must be a string, a number or null")
	}
	if string(env.JSONRPC) != `"2.0"` {
		return nil, errorReply(id, protocol.CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	if env.Method == nil {
		if env.Result != nil || env.Error != nil {
			if id == nil || (env.Result != nil && env.Error != nil) {
				return nil, nil // a malformed response: there is nobody to answer
			}
			return raw, nil
		}
		return nil, errorReply(id, protocol.CodeInvalidRequest, `invalid request: a request needs "method", a response "result" or "error"`)
	}
	if firstByte(env.Method) != '"' {
		return nil, errorReply(id, protocol.CodeInvalidRequest, `invalid request: "method" must be a string`)
	}
	if env.Result != nil || env.Error != nil {
		return nil, errorReply(id, protocol.CodeInvalidRequest, `invalid request: a request cannot carry "result" or "error"`)
	}
	if env.Params != nil {
		if c := firstByte(env.Params); c != '{' && c != '[' {
			return nil, errorReply(id, protocol.CodeInvalidRequest, `invalid request: "params" must be an object or an array`)
		}
	}
	var out bytes.Buffer
	out.Grow(len(env.Method) + len(env.Params) + 48)
	out.WriteString(`{"jsonrpc":"2.0","method":`)
	out.Write(env.Method)
	if env.Params != nil {
		out.WriteString(`,"params":`)
		out.Write(env.Params)
	}
	if id != nil {
		s.nextID++
		synthetic := syntheticPrefix + strconv.FormatUint(s.nextID, 10)
		s.pending[synthetic] = &pendingReply{id: id, batch: b}
		if b != nil {
			b.waiting++
		}
		out.WriteString(`,"id":"`)
		out.WriteString(synthetic)
		out.WriteByte('"')
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// responsePrefix is how jsonrpc2 marshals a response to a request the
// Stream renamed: Response's first field is its id.
var responsePrefix = []byte(`{"id":"` + syntheticPrefix)

// WriteObject writes one JSON-RPC message. A response to a request that
// came in a batch is held until the whole batch can be answered at once.
func (s *Stream) WriteObject(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if bytes.HasPrefix(data, responsePrefix) {
		start := len(`{"id":"`)
		end := bytes.IndexByte(data[start:], '"')
		if end < 0 {
			return s.write(data)
		}
		synthetic := string(data[start : start+end])
		rest := data[start+end+1:]
		s.mu.Lock()
		p, ok := s.pending[synthetic]
		delete(s.pending, synthetic)
		if !ok {
			s.mu.Unlock()
			return s.write(data)
		}
		restored := make([]byte, 0, len(data)+len(p.id))
		restored = append(restored, `{"id":`...)
		restored = append(restored, p.id...)
		restored = append(restored, rest...)
		if p.batch == nil {
			s.mu.Unlock()
			return s.write(restored)
		}
		p.batch.replies = append(p.batch.replies, restored)
		p.batch.waiting--
		if p.batch.waiting > 0 {
			s.mu.Unlock()
			return nil
		}
		data = joinBatch(p.batch.replies)
		s.mu.Unlock()
	}
	return s.write(data)
}

// Close closes the connection at once. Use CloseWith to say why.
func (s *Stream) Close() error {
	return s.ws.CloseNow()
}

// CloseWith closes the connection with a WebSocket close status and
// reason, waiting briefly for the peer's close handshake.
func (s *Stream) CloseWith(code websocket.StatusCode, reason string) error {
	return s.ws.Close(code, reason)
}

func (s *Stream) reply(data []byte) {
	// A failed write closes the connection, which the read loop reports.
	_ = s.write(data)
}

func (s *Stream) write(data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.writeTimeout)
	defer cancel()
	return s.ws.Write(ctx, websocket.MessageText, data)
}

// errorReply builds an error response; a nil id becomes null.
func errorReply(id json.RawMessage, code int64, message string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	data, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   protocol.Error  `json:"error"`
	}{"2.0", id, protocol.Error{Code: code, Message: message}})
	return data
}

func joinBatch(replies [][]byte) []byte {
	return append(append([]byte{'['}, bytes.Join(replies, []byte{','})...), ']')
}

// validID reports whether raw JSON is a string, a number or null.
func validID(raw json.RawMessage) bool {
	switch c := firstByte(raw); {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	case c == 'n':
		return true // json.Valid admits only "null" here
	}
	return false
}

func firstByte(data []byte) byte {
	for _, c := range data {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}
