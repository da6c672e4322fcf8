package a2a

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// Method names of the JSON-RPC binding (specification §9.4).
const (
	methodSendMessage          = "SendMessage"
	methodSendStreamingMessage = "SendStreamingMessage"
	methodGetTask              = "GetTask"
	methodListTasks            = "ListTasks"
	methodCancelTask           = "CancelTask"
	methodSubscribeToTask      = "SubscribeToTask"
	methodGetExtendedAgentCard = "GetExtendedAgentCard"
)

// The push notification config methods (push.go).
const (
	methodCreatePushConfig = "CreateTaskPushNotificationConfig"
	methodGetPushConfig    = "GetTaskPushNotificationConfig"
	methodListPushConfigs  = "ListTaskPushNotificationConfigs"
	methodDeletePushConfig = "DeleteTaskPushNotificationConfig"
)

// request is a JSON-RPC 2.0 request as read from the wire.
type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// response is a JSON-RPC 2.0 response. Result is always written on
// success, as JSON-RPC requires, even when it is an empty object.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// call is one request being served: the agent, the caller and the
// request's HTTP side.
type call struct {
	agent  *agent
	caller string
	req    *request
	r      *http.Request
}

// parseRequest reads one JSON-RPC request from body. Errors say what
// was wrong and where, as JSON-RPC errors; the id is returned whenever
// it could be read, so that the error answers it.
func parseRequest(body []byte) (*request, *Error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, errorf(CodeInvalidRequest, "empty body: want a JSON-RPC 2.0 request object")
	}
	if body[0] == '[' {
		return nil, errorf(CodeInvalidRequest, "batch requests are not supported by A2A; send one request object")
	}
	var req request
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return &req, errorf(CodeInvalidRequest, "field %q: want %s", typeErr.Field, typeErr.Type)
		}
		return nil, errorf(CodeParseError, "body is not JSON: %v", err)
	}
	if dec.More() {
		return nil, errorf(CodeParseError, "body holds more than one JSON value")
	}
	switch {
	case req.JSONRPC != "2.0":
		return &req, errorf(CodeInvalidRequest, `"jsonrpc" must be "2.0"`)
	case !validID(req.ID):
		return &req, errorf(CodeInvalidRequest, `"id" must be a string, a number or null`)
	case req.Method == "":
		return &req, errorf(CodeInvalidRequest, `"method" is missing`)
	}
	return &req, nil
}

// validID reports whether id is a string, a number, null or absent.
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return true
	}
	switch id[0] {
	case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// decodeParams decodes params into v, refusing unknown fields' types
// with the field's name.
func decodeParams(params json.RawMessage, v any) *Error {
	if len(params) == 0 || string(params) == "null" {
		return errorf(CodeInvalidParams, `"params" is missing`)
	}
	if err := json.Unmarshal(protoNames(params), v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return errorf(CodeInvalidParams, "params.%s: want %s", typeErr.Field, typeErr.Type)
		}
		return errorf(CodeInvalidParams, "params: %v", err)
	}
	return nil
}

// checkContentType refuses a body its Content-Type says is not JSON,
// with -32005, the code §5.4 maps to HTTP 415: the JSON-RPC binding
// takes application/json (or application/a2a+json). A request with no
// Content-Type is read as JSON.
func checkContentType(r *http.Request) *Error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || mt == "application/a2a+json") {
		return nil
	}
	return errorf(CodeContentTypeUnsupported, "Content-Type %q: the JSON-RPC binding takes application/json", ct)
}

// checkVersion answers the A2A-Version header, or the A2A-Version
// query parameter a client may send instead (§3.6): 1.0 and its patch
// versions are served. A request without either is a 0.3 client's, as
// §3.6 says an empty header means, and 0.3 is not served.
func checkVersion(r *http.Request) *Error {
	v := strings.TrimSpace(r.Header.Get("A2A-Version"))
	if v == "" {
		v = strings.TrimSpace(r.URL.Query().Get("A2A-Version"))
	}
	switch {
	case v == "1" || v == "1.0" || strings.HasPrefix(v, "1.0."):
		return nil
	case v == "":
		return errorf(CodeVersionNotSupported, "no A2A-Version header, which means 0.3 (§3.6), and this server speaks 1.0 only: send A2A-Version: 1.0")
	}
	return errorf(CodeVersionNotSupported, "A2A-Version %q is not supported: this server speaks 1.0", v)
}

// serveRPC answers one JSON-RPC request to agent a.
func (s *Server) serveRPC(w http.ResponseWriter, r *http.Request, a *agent) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "the A2A JSON-RPC endpoint takes POST; the agent's card is at .well-known/agent-card.json", http.StatusMethodNotAllowed)
		return
	}
	caller := ""
	if s.opts.Caller != nil {
		var err error
		if caller, err = s.opts.Caller(r, &a.Agent); err != nil {
			if errors.Is(err, ErrUnauthenticated) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="bub-bus"`)
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxRequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("request body over %d bytes", tooBig.Limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	perr := checkContentType(r)
	var req *request
	if perr == nil {
		req, perr = parseRequest(body)
	}
	var id json.RawMessage
	if req != nil {
		id = req.ID
	}
	if perr != nil {
		s.m.request(a.Name, "", perr)
		writeJSON(w, &response{JSONRPC: "2.0", ID: id, Error: perr})
		return
	}
	if verr := checkVersion(r); verr != nil {
		s.m.request(a.Name, req.Method, verr)
		writeJSON(w, &response{JSONRPC: "2.0", ID: id, Error: verr})
		return
	}
	c := &call{agent: a, caller: caller, req: req, r: r}
	var result any
	switch req.Method {
	case methodSendStreamingMessage:
		s.sendStreaming(w, c)
		return
	case methodSubscribeToTask:
		s.subscribe(w, c)
		return
	case methodSendMessage:
		result, err = s.sendMessage(c)
	case methodGetTask:
		result, err = s.getTask(c)
	case methodListTasks:
		result, err = s.listTasks(c)
	case methodCancelTask:
		result, err = s.cancelTask(c)
	case methodCreatePushConfig, methodGetPushConfig, methodListPushConfigs, methodDeletePushConfig:
		result, err = s.pushMethod(c)
	case methodGetExtendedAgentCard:
		// §3.3.4: a card without capabilities.extendedAgentCard MUST
		// answer it so.
		err = errorf(CodeUnsupportedOperation, "GetExtendedAgentCard: agent %q has no extended card (capabilities.extendedAgentCard is false); its card is at .well-known/agent-card.json", a.Name)
	default:
		err = errorf(CodeMethodNotFound, "no method %q; A2A 1.0 names methods as SendMessage, GetTask, ...", req.Method)
	}
	if err != nil {
		e := asError(err)
		if e.Code == CodeInternalError {
			s.log.Error("a2a: request failed", "agent", a.Name, "method", req.Method, "err", err)
		}
		s.m.request(a.Name, req.Method, e)
		writeJSON(w, &response{JSONRPC: "2.0", ID: id, Error: e})
		return
	}
	s.m.request(a.Name, req.Method, nil)
	writeJSON(w, &response{JSONRPC: "2.0", ID: id, Result: result})
}

// writeJSON writes v as the JSON body of a 200 answer.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	// The client went away if this fails; nothing is left to tell it.
	_ = json.NewEncoder(w).Encode(v)
}
