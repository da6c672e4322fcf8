// Package rpcstream carries JSON-RPC 2.0 over a WebSocket connection: one
// JSON-RPC object, or one batch, per text message, for the bus and the
// peer SDK alike.
//
// ReadRequest hands over requests with their params exactly as the peer
// sent them (slices of the message read, never decoded into a map and
// marshalled again), so payloads pass through byte for byte; Reply answers
// them; Call sends a request whose params are already encoded and matches
// its answer. docs/BENCHMARKS.md has the numbers that decided this over a
// general JSON-RPC library.
//
// The Stream answers malformed input itself, as JSON-RPC 2.0 requires, and
// the connection stays open through all of it: invalid JSON gets -32700
// with a null id, a value that is not a request gets -32600, a batch is
// split into its requests and their responses are joined into one array,
// and every request id is echoed byte for byte. One thing ends the
// connection: a text message that is not valid UTF-8, which RFC 6455
// requires failing with 1007; nothing of it is handed over, so a bus
// never forwards such bytes. To echo ids exactly, each
// request is handed over under a synthetic id of the Stream's own, which
// Reply turns back into the peer's; a handler must therefore answer each
// request exactly once, and never answer a notification.
package rpcstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/internal/jsonscan"
	"github.com/bub-bus/bub/internal/outbound"
	"github.com/bub-bus/bub/protocol"
)

// ErrClosed is returned by Call when the connection ends before the
// answer arrives, or had ended before the call.
var ErrClosed = errors.New("rpcstream: connection closed")

// ErrNotSent wraps the error of a Call or CallAsync whose request was
// never written: the connection had ended, or had sent its close frame,
// first. Unlike a call cut off by the close (ErrClosed alone), the peer
// cannot have seen the request.
var ErrNotSent = errors.New("rpcstream: request not sent")

// ErrParked is returned by ReadRequest when the connection was parked
// (ParkWhenIdle) instead of waiting for the peer: nothing was read, and
// whoever parked it reads on later.
var ErrParked = errors.New("rpcstream: connection parked until the peer sends")

// ErrInvalidUTF8 is returned by ReadRequest for a text message that is
// not valid UTF-8; the Stream has failed the connection with status 1007
// (invalid frame payload data), as RFC 6455 section 8.1 requires, and
// handed over nothing of the message.
var ErrInvalidUTF8 = errors.New("rpcstream: text message is not valid UTF-8")

// Stream is a JSON-RPC 2.0 connection over a WebSocket connection.
//
// ReadRequest must be called from one goroutine at a time; Reply and Call
// may be called concurrently.
type Stream struct {
	ws           *websocket.Conn
	writeTimeout time.Duration
	// out, when set, takes every message the Stream writes, coalesced
	// (NewOutbound); else they go through ws, one write call each.
	out *outbound.Conn

	// queue holds messages split from a batch, waiting to be read, from
	// queue[head] on; only the reading goroutine touches it. Emptied, it
	// starts again at the front of its array, so that a message read
	// does not cost the array a new one (queue[1:] left it no room),
	// unless a large batch grew it: an idle connection keeps a few
	// entries, not the largest batch it was ever sent.
	queue []message
	head  int
	// answered holds the answers to the Stream's calls found in the
	// message being read, handed to their Answerers once mu is released
	// (an Answerer may write to this Stream); only the reading goroutine
	// touches it.
	answered []answer

	// mu guards the fields below.
	mu      sync.Mutex
	pending map[string]pendingReply
	nextID  uint64
	// calls are the Stream's own calls waiting for an answer, by id.
	calls      map[uint64]Answerer
	nextCallID uint64
	closed     bool
	// onLate is called for an answer to one of the Stream's calls that
	// came after the call gave up; set before reading starts.
	onLate func()
	// park, when set, is called instead of waiting for the peer
	// (ParkWhenIdle); set before reading starts.
	park func() bool
}

// message is one checked JSON-RPC request; the zero value, with no
// method, is none.
type message struct {
	method    json.RawMessage // the JSON string, quotes included
	params    json.RawMessage // nil when absent
	synthetic string          // "" for a notification
}

// callResult is the answer to one of the Stream's own calls.
type callResult struct {
	result json.RawMessage
	err    error
}

// answer is an answer on its way to its Answerer.
type answer struct {
	to Answerer
	callResult
}

// Answerer takes the answer to a request sent with CallAsync.
type Answerer interface {
	// Answer is called once, on the goroutine reading the Stream, with
	// the answer's result, or a *ResponseError when the peer answered
	// with an error, or ErrClosed when the connection ended first. It
	// must not wait: the connection is not read meanwhile.
	Answer(result json.RawMessage, err error)
}

// chanAnswer is the Answerer of a Call, which waits on it.
type chanAnswer chan callResult

func (ch chanAnswer) Answer(result json.RawMessage, err error) { ch <- callResult{result, err} }

// pendingReply remembers a request handed over under a synthetic id.
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
	return &Stream{ws: ws, writeTimeout: writeTimeout, pending: make(map[string]pendingReply), calls: make(map[uint64]Answerer)}
}

// NewOutbound returns a Stream over ws, a connection accepted by
// outbound.Accept or dialed by outbound.Dial, that writes through out:
// messages written while another is on its way leave together, and out's
// write timeout drops a peer that does not read.
func NewOutbound(ws *websocket.Conn, out *outbound.Conn) *Stream {
	s := New(ws, 0)
	s.out = out
	return s
}

// ParkWhenIdle has ReadRequest call park whenever it would read from the
// connection, with nothing read and not handed over, so that the
// connection can be parked instead of waited on (outbound.Conn.Park):
// when park returns true, ReadRequest returns ErrParked, and the caller
// reads on, on whatever goroutine, once the connection is resumed. Call
// it before reading starts.
func (s *Stream) ParkWhenIdle(park func() bool) { s.park = park }

// maxKeptQueue bounds the queue entries a Stream keeps once its queue
// is empty.
const maxKeptQueue = 8

// syntheticPrefix starts every id the Stream hands over. The Stream's own
// calls use numeric ids, so the two never meet.
const syntheticPrefix = "~r"

// Request is a request as ReadRequest hands it over.
type Request struct {
	Method string
	// Params are the bytes the peer sent, nil when it sent none.
	Params json.RawMessage
	// ID is the Stream's own name for the request, which Reply turns
	// back into the peer's id; "" for a notification, which is never
	// answered.
	ID string
}

// Notif reports whether the request is a notification.
func (r *Request) Notif() bool { return r.ID == "" }

// ReadRequest reads the next JSON-RPC request, answering malformed input
// itself and reading on. Its Params are the bytes the peer sent, and its
// ID a synthetic one that Reply turns back into the peer's. Answers
// to the Stream's own calls go to their callers; other responses are
// dropped, as they answer nothing. After ParkWhenIdle, it returns
// ErrParked rather than wait for the peer.
func (s *Stream) ReadRequest() (*Request, error) {
	for {
		msg, err := s.next()
		if err != nil {
			return nil, err
		}
		method, ok := methodName(msg.method)
		if !ok {
			continue // cannot happen: the method was checked to be a JSON string
		}
		return &Request{Method: method, Params: msg.params, ID: msg.synthetic}, nil
	}
}

// methodName returns the method of a request, raw a JSON string: one of
// the protocol's own methods as its constant, so that reading a request
// allocates no string for its name, any other decoded.
func methodName(raw []byte) (string, bool) {
	if len(raw) >= 2 {
		name := raw[1 : len(raw)-1]
		for _, m := range knownMethods {
			if string(name) == m {
				return m, true
			}
		}
	}
	return jsonscan.String(raw)
}

// knownMethods are the methods a bus or a peer reads on every message,
// the most frequent first.
var knownMethods = [...]string{
	protocol.MethodSendMessage, protocol.MethodProcessMessage, protocol.MethodPing,
	protocol.MethodSubscribe, protocol.MethodUnsubscribe, protocol.MethodInitialize,
}

// next returns the next message to hand over, reading from the connection
// when none is queued. When the connection fails, the Stream's calls still
// waiting fail with ErrClosed.
func (s *Stream) next() (message, error) {
	for s.head == len(s.queue) {
		if s.park != nil && s.park() {
			return message{}, ErrParked
		}
		typ, data, err := s.read()
		if errors.Is(err, outbound.ErrFrameTooBig) {
			// Refused on its header (outbound.Conn.SetReadLimit): close
			// as coder/websocket does once the bytes it counts pass its
			// limit, and say so the same way.
			s.failCalls()
			_ = s.ws.Close(websocket.StatusMessageTooBig, "frame larger than the read limit")
			return message{}, fmt.Errorf("%w: %w", websocket.ErrMessageTooBig, err)
		}
		if err != nil {
			s.failCalls()
			return message{}, err
		}
		if typ != websocket.MessageText {
			s.reply(errorReply(nil, protocol.CodeInvalidRequest, "invalid request: binary messages are not accepted; send JSON-RPC as text"))
			continue
		}
		if at := InvalidUTF8At(data); at >= 0 {
			// json.Valid does not look inside strings, and websocket
			// does not check text messages: without this, the bytes
			// would be handed over, and a bus would forward them to
			// subscribers whose WebSocket libraries fail on them.
			s.failCalls()
			_ = s.ws.Close(websocket.StatusInvalidFramePayloadData, fmt.Sprintf("text message is not valid UTF-8 at byte %d", at))
			return message{}, fmt.Errorf("%w at byte %d", ErrInvalidUTF8, at)
		}
		s.accept(data)
	}
	msg := s.queue[s.head]
	s.queue[s.head] = message{}
	if s.head++; s.head == len(s.queue) {
		s.queue, s.head = s.queue[:0], 0
		if cap(s.queue) > maxKeptQueue {
			s.queue = nil
		}
	}
	return msg, nil
}

// read reads the next message whole, as websocket.Conn.Read does, but
// into a buffer kept from message to message and then copied out at its
// exact size: Read's io.ReadAll grows its buffer from 512 bytes, so a
// message of 1 KiB cost three allocations and 2.8 KiB, one of 64 KiB
// about twenty and five times its size. The copy is the message's own
// buffer, never reused, as accept requires.
func (s *Stream) read() (websocket.MessageType, []byte, error) {
	typ, r, err := s.ws.Reader(context.Background())
	if err != nil {
		return 0, nil, err
	}
	buf := readBufPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledFrame {
			buf.Reset()
			readBufPool.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(r); err != nil {
		return 0, nil, err
	}
	return typ, bytes.Clone(buf.Bytes()), nil
}

// readBufPool holds the buffers read reads messages into; one is taken
// only while a message is read, so an idle connection holds none.
var readBufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// accept checks one WebSocket message, queueing the requests to hand over
// and answering the rest.
func (s *Stream) accept(data []byte) {
	first := firstByte(data)
	// One validating pass over the whole message (jsonscan.Valid: the
	// verdict of json.Valid at several times its speed); after it,
	// members are read in place (jsonscan) and params stay a slice of
	// data, never decoded or copied here. data must therefore be the message's own
	// buffer, never reused (websocket.Conn.Read allocates one per
	// message): the bus keeps payloads as slices of it.
	if !jsonscan.Valid(data) {
		s.reply(errorReply(nil, protocol.CodeParseError, "parse error: the message is not valid JSON"))
		return
	}
	if first == '{' {
		msg, reply := s.prepare(data)
		s.handAnswers()
		if reply != nil {
			s.reply(reply)
		} else if msg.method != nil {
			s.queue = append(s.queue, msg)
		}
		return
	}
	if first != '[' {
		s.reply(errorReply(nil, protocol.CodeInvalidRequest, "invalid request: a JSON-RPC message must be an object"))
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
		if msg.method != nil {
			s.queue = append(s.queue, msg)
		}
	}
	done := b.waiting == 0
	s.mu.Unlock()
	s.handAnswers()
	// Requests in the batch are answered as their handlers reply; when
	// there are none, what the batch gets is known now: error replies,
	// or nothing at all for a batch of notifications.
	if done && len(b.replies) > 0 {
		s.reply(joinBatch(b.replies))
	}
}

func (s *Stream) prepare(raw json.RawMessage) (msg message, reply []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prepareLocked(raw, nil)
}

// envelope is the shape every JSON-RPC message is checked against, its
// members slices of the message. Absent members stay nil; a JSON null is
// the bytes "null".
type envelope struct {
	JSONRPC json.RawMessage
	Method  json.RawMessage
	Params  json.RawMessage
	ID      json.RawMessage
	Result  json.RawMessage
	Error   json.RawMessage
}

// readEnvelope reads the envelope of obj, a valid JSON object, in place,
// matching keys as json.Unmarshal does (without regard to case, the last
// duplicate winning).
func readEnvelope(obj []byte) envelope {
	var env envelope
	for key, value := range jsonscan.Members(obj) {
		switch {
		case jsonscan.KeyIs(key, "jsonrpc"):
			env.JSONRPC = value
		case jsonscan.KeyIs(key, "method"):
			env.Method = value
		case jsonscan.KeyIs(key, "params"):
			env.Params = value
		case jsonscan.KeyIs(key, "id"):
			env.ID = value
		case jsonscan.KeyIs(key, "result"):
			env.Result = value
		case jsonscan.KeyIs(key, "error"):
			env.Error = value
		}
	}
	return env
}

// prepareLocked checks one JSON-RPC message (raw is valid JSON). It
// returns the request to hand on (a message by value, so that it costs no
// allocation), or the error reply the sender gets, or neither for a
// response (an answer to one of the Stream's own calls goes
// to its caller here; any other answers nothing and is dropped).
func (s *Stream) prepareLocked(raw json.RawMessage, b *batch) (msg message, reply []byte) {
	if firstByte(raw) != '{' {
		return message{}, errorReply(nil, protocol.CodeInvalidRequest, "invalid request: a JSON-RPC message must be an object")
	}
	envelope := readEnvelope(raw)
	env := &envelope
	id := env.ID
	if id != nil && !validID(id) {
		return message{}, errorReply(nil, protocol.CodeInvalidRequest, "invalid request: id must be a string, a number or null")
	}
	if string(env.JSONRPC) != `"2.0"` {
		return message{}, errorReply(id, protocol.CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	if env.Method == nil {
		if env.Result != nil || env.Error != nil {
			if id == nil || (env.Result != nil && env.Error != nil) {
				return message{}, nil // a malformed response: there is nobody to answer
			}
			s.answerLocked(id, env)
			return message{}, nil
		}
		return message{}, errorReply(id, protocol.CodeInvalidRequest, `invalid request: a request needs "method", a response "result" or "error"`)
	}
	if firstByte(env.Method) != '"' {
		return message{}, errorReply(id, protocol.CodeInvalidRequest, `invalid request: "method" must be a string`)
	}
	if env.Result != nil || env.Error != nil {
		return message{}, errorReply(id, protocol.CodeInvalidRequest, `invalid request: a request cannot carry "result" or "error"`)
	}
	if env.Params != nil {
		if c := firstByte(env.Params); c != '{' && c != '[' {
			return message{}, errorReply(id, protocol.CodeInvalidRequest, `invalid request: "params" must be an object or an array`)
		}
	}
	msg = message{method: env.Method, params: env.Params}
	if id != nil {
		s.nextID++
		// Built on the stack: one allocation, the string, not two.
		var name [len(syntheticPrefix) + 20]byte
		msg.synthetic = string(strconv.AppendUint(append(name[:0], syntheticPrefix...), s.nextID, 10))
		s.pending[msg.synthetic] = pendingReply{id: id, batch: b}
		if b != nil {
			b.waiting++
		}
	}
	return msg, nil
}

// Reply answers a request read with ReadRequest: with result (marshalled
// to JSON) or, when rerr is not nil, with that error. It
// restores the peer's id and holds the answers to a batch until all are in.
func (s *Stream) Reply(id string, result any, rerr *protocol.Error) error {
	member, v := resultMember, result
	if rerr != nil {
		member, v = errorMember, rerr
	}
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode reply: %w", err)
	}
	return s.respond(id, member, body)
}

// ReplyRaw answers a request read with ReadRequest with result, encoded
// JSON that it writes as it is, without the check and the copy of
// json.Marshal: the caller vouches that result is one valid JSON value.
// It is Reply for a result encoded already, such as one appended by hand
// into a buffer on the caller's stack; result may be reused when
// ReplyRaw returns.
func (s *Stream) ReplyRaw(id string, result []byte) error {
	return s.respond(id, resultMember, result)
}

// The members of a response that carry its answer, with the comma that
// joins them to the id.
const (
	resultMember = `,"result":`
	errorMember  = `,"error":`
)

// respond writes the response whose answer is member and value, to the
// request the Stream renamed synthetic: under the peer's own id, and with
// a batch's other answers once they are all in. A response on its own is
// built in a pooled buffer, as Call builds its requests.
func (s *Stream) respond(synthetic, member string, value []byte) error {
	s.mu.Lock()
	p, ok := s.pending[synthetic]
	delete(s.pending, synthetic)
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("reply to unknown request %q", synthetic)
	}
	if p.batch == nil {
		s.mu.Unlock()
		bp := framePool.Get().(*[]byte)
		frame := appendResponse((*bp)[:0], p.id, member, value)
		err := s.write(frame)
		putFrame(bp, frame)
		return err
	}
	p.batch.replies = append(p.batch.replies, appendResponse(make([]byte, 0, len(p.id)+len(member)+len(value)+24), p.id, member, value))
	p.batch.waiting--
	if p.batch.waiting > 0 {
		s.mu.Unlock()
		return nil
	}
	data := joinBatch(p.batch.replies)
	s.mu.Unlock()
	return s.write(data)
}

// appendResponse appends the response to the request whose id, as the
// peer sent it, is id: member (resultMember or errorMember) and value.
func appendResponse(dst, id []byte, member string, value []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = append(dst, id...)
	dst = append(dst, member...)
	dst = append(dst, value...)
	return append(dst, `,"jsonrpc":"2.0"}`...)
}

// Call sends a request for method with params, raw JSON written exactly
// as given, and waits for the answer: its result, or a *ResponseError
// when the peer answered with an error. It returns ErrClosed when the
// connection ends first, and ctx's error when ctx ends first; a late
// answer is then dropped. The request's id is a number of the Stream's
// own, numeric, so it never meets the synthetic ids of requests read.
//
// written, when not nil, is called once the request has been written (or
// its write failed), before Call waits for the answer: a caller can keep
// its requests in order on the connection without waiting for answers.
func (s *Stream) Call(ctx context.Context, method string, params []byte, written func()) (json.RawMessage, error) {
	return s.call(ctx, method, params, nil, written)
}

// ParamsAppender appends a request's params, encoded JSON, to dst.
type ParamsAppender interface {
	AppendParams(dst []byte) []byte
}

// CallAppend is Call with params that p appends straight into the frame
// Call writes: the params are encoded once, into a buffer that is reused
// as soon as the frame is written, instead of into one the caller would
// have to keep until the answer came (for a fan-out, a payload's copy per
// subscriber still waiting to answer).
func (s *Stream) CallAppend(ctx context.Context, method string, p ParamsAppender, written func()) (json.RawMessage, error) {
	return s.call(ctx, method, nil, p, written)
}

func (s *Stream) call(ctx context.Context, method string, params []byte, appender ParamsAppender, written func()) (json.RawMessage, error) {
	done := make(chanAnswer, 1)
	id, err := s.send(method, params, appender, done)
	if written != nil {
		written()
	}
	if err != nil {
		return nil, err
	}
	select {
	case r := <-done:
		return r.result, r.err
	case <-ctx.Done():
		s.Abandon(id)
		return nil, ctx.Err()
	}
}

// CallAsync sends a request for method with params that p appends, as
// CallAppend does, and returns once it is written (or queued on the
// connection): a gets the answer, on the goroutine reading the Stream,
// unless the call is abandoned first. It returns the call's id, for
// Abandon; when it returns an error, a is never called.
func (s *Stream) CallAsync(method string, p ParamsAppender, a Answerer) (id uint64, err error) {
	return s.send(method, nil, p, a)
}

// Abandon gives up on the call id: its answer, if one comes, is dropped
// (a late answer). It reports whether the call was still waiting, so its
// Answerer will never be called; false means it was, or is about to be.
func (s *Stream) Abandon(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.calls[id]
	delete(s.calls, id)
	return ok
}

// send registers a's call and writes its request; see CallAsync.
func (s *Stream) send(method string, params []byte, appender ParamsAppender, a Answerer) (uint64, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: %w", ErrNotSent, ErrClosed)
	}
	id := s.nextCallID
	s.nextCallID++
	s.calls[id] = a
	s.mu.Unlock()

	bp := framePool.Get().(*[]byte)
	frame := append((*bp)[:0], `{"id":`...)
	frame = strconv.AppendUint(frame, id, 10)
	frame = append(frame, `,"jsonrpc":"2.0","method":`...)
	frame = strconv.AppendQuote(frame, method)
	frame = append(frame, `,"params":`...)
	if appender != nil {
		frame = appender.AppendParams(frame)
	} else {
		frame = append(frame, params...)
	}
	frame = append(frame, '}')
	err := s.write(frame)
	putFrame(bp, frame)
	if err != nil && s.Abandon(id) {
		// Refused before a byte left, or cut short by the socket's
		// close: either way the peer has no whole request to act on.
		if errors.Is(err, outbound.ErrCloseSent) || errors.Is(err, net.ErrClosed) {
			err = fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		return 0, err
	}
	// Written, or the connection failed and its reader ends the call.
	return id, nil
}

// framePool holds the buffers Call builds frames in; a frame is written
// before Call returns its buffer, so one buffer serves call after call.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// putFrame returns frame, grown from the buffer bp held, to framePool.
func putFrame(bp *[]byte, frame []byte) {
	if cap(frame) <= maxPooledFrame {
		*bp = frame
		framePool.Put(bp)
	}
}

// maxPooledFrame bounds the buffers framePool keeps, so one huge message
// does not pin its buffer for good.
const maxPooledFrame = 256 << 10

// OnLateAnswer sets fn to be called, on the reading goroutine, for each
// answer to a Call that arrives after that Call returned (its context
// ended): the answer itself is dropped, but it shows that the peer
// answers. Set it before reading starts; fn must not call the Stream.
func (s *Stream) OnLateAnswer(fn func()) {
	s.mu.Lock()
	s.onLate = fn
	s.mu.Unlock()
}

// ResponseError is a peer's error answer to a Call.
type ResponseError struct {
	Code    int64
	Message string
	// Data is the error's data member as sent, or nil.
	Data json.RawMessage
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("error %d: %s", e.Code, e.Message)
}

// answerLocked hands a response to the Call waiting for it, if any.
func (s *Stream) answerLocked(id json.RawMessage, env *envelope) {
	if len(id) == 0 || id[0] < '0' || id[0] > '9' {
		return
	}
	n, err := strconv.ParseUint(string(id), 10, 64)
	if err != nil {
		return
	}
	to, ok := s.calls[n]
	if !ok {
		if n < s.nextCallID && s.onLate != nil {
			s.onLate()
		}
		return
	}
	delete(s.calls, n)
	var r callResult
	if env.Error != nil {
		var e ResponseError
		var wire struct {
			Code    *int64          `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		}
		if json.Unmarshal(env.Error, &wire) != nil || wire.Code == nil {
			e = ResponseError{Code: protocol.CodeInvalidRequest, Message: fmt.Sprintf("malformed error object %.64s", env.Error)}
		} else {
			e = ResponseError{Code: *wire.Code, Message: wire.Message, Data: wire.Data}
		}
		r.err = &e
	} else {
		r.result = env.Result
	}
	s.answered = append(s.answered, answer{to, r})
}

// handAnswers hands the answers read to their Answerers; the caller must
// not hold mu.
func (s *Stream) handAnswers() {
	for i, a := range s.answered {
		s.answered[i] = answer{}
		a.to.Answer(a.result, a.err)
	}
	s.answered = s.answered[:0]
}

// failCalls ends every waiting Call with ErrClosed, and every later one.
func (s *Stream) failCalls() {
	s.mu.Lock()
	s.closed = true
	for id, to := range s.calls {
		s.answered = append(s.answered, answer{to, callResult{err: ErrClosed}})
		delete(s.calls, id)
	}
	s.mu.Unlock()
	s.handAnswers()
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
	if s.out != nil {
		return s.out.WriteMessage(websocket.MessageText, data)
	}
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

// CheckUTF8 refuses b, what, unless it is valid UTF-8, naming the byte
// offset of the first invalid sequence, as the WebSocket reader's close
// does, for the bus's other doors: a strict peer (a browser, Node's
// WebSocket) drops the connection on a frame that is not, so the bus
// never relays one.
func CheckUTF8(what string, b []byte) error {
	off := InvalidUTF8At(b)
	if off < 0 {
		return nil
	}
	return protocol.Errorf(protocol.ErrParse, "%s is not valid UTF-8: byte %d (0x%02x) does not begin a valid sequence", what, off, b[off])
}

// InvalidUTF8At returns the offset of the first byte of data that does
// not start a valid UTF-8 sequence, or -1 when data is valid UTF-8.
func InvalidUTF8At(data []byte) int {
	if utf8.Valid(data) {
		return -1 // the common case, at memory speed for ASCII
	}
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1 // not reached: utf8.Valid said otherwise
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
