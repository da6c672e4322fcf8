package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
)

// The other direction (docs/A2A.md, "Calling remote agents"): Call sends
// a message to a remote A2A agent with a2a-go's client and hands each
// event of its task to the caller; bub a2a call prints them and
// publishes them on the bus as Updates, so that a bus agent can call an
// agent that speaks A2A only.

// CallOptions configure Call.
type CallOptions struct {
	// Agent is the remote agent's base URL, whose card is at
	// /.well-known/agent-card.json under it, or the card's own URL (one
	// ending in .json). Required.
	Agent string
	// Token, when set, is sent as "Authorization: Bearer" with every
	// request to the agent, the card's included. It is never logged.
	Token string
	// Message is what is sent: a user message with at least one part. A
	// missing messageId is made.
	Message *spec.Message
	// NoStream sends a blocking SendMessage even when the card says the
	// agent streams; by default a streaming agent is streamed.
	NoStream bool
	// OnEvent gets each event as it comes (the streamed events, or the
	// one answer of a blocking send) and where it left the call. An
	// error from it ends the call with that error.
	OnEvent func(spec.Event, *CallResult) error
	// HTTPClient makes the requests. Default: a client without a
	// timeout (the context bounds the call; a stream may be long).
	HTTPClient *http.Client
}

// CallResult is where a call left the remote task.
type CallResult struct {
	// Card is the remote agent's card.
	Card *spec.AgentCard
	// TaskID and ContextID are the task's; TaskID is empty when the
	// agent answered with a message and made no task.
	TaskID    spec.TaskID
	ContextID string
	// State is the task's last state seen; empty without a task.
	State spec.TaskState
	// Text is the text of the last agent message seen: the task's
	// status message, or the message the agent answered with.
	Text string
}

// Done reports whether the call ended well: a task completed, or an
// answer without a task.
func (r *CallResult) Done() bool {
	return r.TaskID == "" && r.Text != "" || r.State == spec.TaskStateCompleted
}

// Waiting reports whether the remote task waits for its caller
// (input-required or auth-required): send again with its TaskID.
func (r *CallResult) Waiting() bool { return interrupted(r.State) }

// Call discovers the agent at o.Agent, sends it o.Message, and follows
// its task until it ends or waits for its caller, giving each event to
// o.OnEvent. Errors say which step failed and where.
func Call(ctx context.Context, o *CallOptions) (*CallResult, error) {
	if o.Message == nil || len(o.Message.Parts) == 0 {
		return nil, errors.New("a2a call: no message to send (it needs at least one part)")
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	if o.Token != "" {
		hc = &http.Client{Transport: bearer{token: o.Token, next: cmpTransport(hc.Transport)}, Timeout: hc.Timeout}
	}
	base, path, err := cardLocation(o.Agent)
	if err != nil {
		return nil, err
	}
	var opts []agentcard.ResolveOption
	if path != "" {
		opts = append(opts, agentcard.WithPath(path))
	}
	card, err := agentcard.NewResolver(hc).Resolve(ctx, base, opts...)
	if err != nil {
		return nil, fmt.Errorf("a2a call: read the agent card of %s: %w", o.Agent, err)
	}
	client, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		return nil, fmt.Errorf("a2a call: agent %q at %s: no interface this client speaks (JSON-RPC, A2A 1.0): %w", card.Name, o.Agent, err)
	}
	defer client.Destroy()
	msg := *o.Message
	msg.Role = spec.MessageRoleUser
	if msg.ID == "" {
		msg.ID = spec.NewMessageID()
	}
	req := &spec.SendMessageRequest{Message: &msg}
	res := &CallResult{Card: card}
	take := func(ev spec.Event) error {
		res.see(ev)
		if o.OnEvent != nil {
			return o.OnEvent(ev, res)
		}
		return nil
	}
	where := fmt.Sprintf("agent %q at %s", card.Name, o.Agent)
	if !card.Capabilities.Streaming || o.NoStream {
		got, err := client.SendMessage(ctx, req)
		if err != nil {
			return res, fmt.Errorf("a2a call: SendMessage to %s: %w", where, err)
		}
		return res, take(got)
	}
	for ev, err := range client.SendStreamingMessage(ctx, req) {
		if err != nil {
			return res, fmt.Errorf("a2a call: SendStreamingMessage to %s: %w", where, err)
		}
		if err := take(ev); err != nil {
			return res, err
		}
	}
	return res, nil
}

// see notes where ev leaves the task.
func (r *CallResult) see(ev spec.Event) {
	switch e := ev.(type) {
	case *spec.Task:
		r.TaskID, r.ContextID, r.State = e.ID, e.ContextID, e.Status.State
		r.Text = textOf(e.Status.Message)
	case *spec.TaskStatusUpdateEvent:
		r.TaskID, r.ContextID, r.State = e.TaskID, e.ContextID, e.Status.State
		if e.Status.Message != nil {
			r.Text = textOf(e.Status.Message)
		}
	case *spec.Message:
		r.Text = messageText(e)
		if e.TaskID != "" {
			r.TaskID = e.TaskID
		}
		r.ContextID = e.ContextID
	}
}

// textOf is m's text parts, "" for no message.
func textOf(m *spec.Message) string {
	if m == nil {
		return ""
	}
	return messageText(m)
}

// cardLocation splits an agent URL into the base the resolver takes
// and the card's path, "" for the well-known one.
func cardLocation(agent string) (base, path string, err error) {
	u, err := url.Parse(agent)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("a2a call: agent %q: want the agent's http:// or https:// URL, or its card's", agent)
	}
	if strings.HasSuffix(u.Path, ".json") {
		path = u.Path
		u.Path, u.RawPath = "", ""
		return strings.TrimSuffix(u.String(), "/"), path, nil
	}
	return strings.TrimSuffix(u.String(), "/"), "", nil
}

// bearer adds the agent's token to each request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// cmpTransport is t, or the default transport for nil.
func cmpTransport(t http.RoundTripper) http.RoundTripper {
	if t == nil {
		return http.DefaultTransport
	}
	return t
}

// TypeUpdate is the type of an Update.
const TypeUpdate = "a2a_update"

// Update is what bub a2a call publishes on the bus for each event of a
// remote agent's task: the event itself, and the chat fields a bus agent
// reads without knowing A2A (text, and the task and context ids as the
// correlation and conversation ids, as on the A2A server's side).
type Update struct {
	// Type is "a2a_update".
	Type string `json:"type"`
	// Agent is the remote agent's URL, as called.
	Agent string `json:"agent"`
	// Text is the event's text: a status's or a message's text parts,
	// an artifact's.
	Text string `json:"text,omitempty"`
	// CorrelationID is the remote task's id, ConversationID its context
	// id.
	CorrelationID  string `json:"correlation_id,omitempty"`
	ConversationID string `json:"conversation_id,omitempty"`
	// State is the task's state after the event, TASK_STATE_*; empty
	// for a message answer.
	State spec.TaskState `json:"state,omitempty"`
	// Final is set on the last update of the call: the task ended, waits
	// for its caller, or the agent answered with a message.
	Final bool `json:"final"`
	// Event is the event as A2A gives it: a StreamResponse.
	Event json.RawMessage `json:"event"`
}

// NewUpdate is the Update of ev, which left the call at res.
func NewUpdate(agent string, ev spec.Event, res *CallResult) (*Update, error) {
	raw, err := json.Marshal(spec.StreamResponse{Event: ev})
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	u := &Update{Type: TypeUpdate, Agent: agent, CorrelationID: string(res.TaskID), ConversationID: res.ContextID, State: res.State, Event: raw}
	switch e := ev.(type) {
	case *spec.Task:
		u.Text = textOf(e.Status.Message)
	case *spec.TaskStatusUpdateEvent:
		u.Text = textOf(e.Status.Message)
	case *spec.Message:
		u.Text, u.Final = messageText(e), true
	case *spec.TaskArtifactUpdateEvent:
		if e.Artifact != nil {
			u.Text = messageText(&spec.Message{Parts: e.Artifact.Parts})
		}
	}
	u.Final = u.Final || res.State.Terminal() || interrupted(res.State)
	return u, nil
}
