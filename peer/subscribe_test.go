package peer_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// A Subscribe whose call timed out after the bus applied it leaves the SDK
// and the bus agreeing: a retry with the same options succeeds, one with
// other options gets them, and an Unsubscribe removes what the bus holds.
// The relay loses the bus's answer, as a slow bus would have it arrive
// too late.
func TestSubscribeAfterTimeoutAgrees(t *testing.T) {
	for _, tt := range []struct {
		name  string
		retry *peer.SubscribeOptions // nil: unsubscribe instead
		want  []string               // the clientIds that get the message
	}{
		{name: "same options", retry: &peer.SubscribeOptions{}, want: []string{"sub"}},
		{name: "other options", retry: &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll}, want: []string{"sub", "old"}},
		{name: "unsubscribe", want: []string{"old"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := startBus(t, nil)
			old := dial(t, b.URL, "old", nil)
			require.NoError(t, old.Subscribe(t.Context(), "t:", processed, nil))
			r := startRelay(t, b.URL)
			sub := dial(t, r.URL, "sub", &peer.Options{NoReconnect: true})

			lost := r.loseAnswer(protocol.MethodSubscribe)
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			err := sub.Subscribe(ctx, "t:1", processed, nil)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			select {
			case <-lost: // the bus answered, so it holds the subscription
			case <-time.After(10 * time.Second):
				t.Fatal("the bus never answered the subscribe")
			}

			// Meanwhile the bus routes to a subscription the SDK has no
			// handler for: it asks for the message again instead of
			// letting it go as not processed.
			before, err := old.SendMessage(t.Context(), "t:1", msg("x"), nil)
			require.NoError(t, err)
			require.Len(t, before.Acks, 2)
			assert.Equal(t, "sub", before.Acks[0].ClientID)
			assert.Contains(t, before.Acks[0].Message, "not confirmed")

			if tt.retry != nil {
				require.NoError(t, sub.Subscribe(t.Context(), "t:1", processed, tt.retry))
				// The SDK holds it now, as the bus does.
				require.Equal(t, int64(protocol.CodeAlreadySubscribed), protocol.CodeOf(sub.Subscribe(t.Context(), "t:1", processed, nil)))
			} else {
				require.NoError(t, sub.Unsubscribe(t.Context(), "t:1"))
			}
			result, err := old.SendMessage(t.Context(), "t:1", msg("x"), nil)
			require.NoError(t, err)
			var got []string
			for _, a := range result.Acks {
				assert.True(t, a.Processed, "ack %+v", a)
				got = append(got, a.ClientID)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// relay is a WebSocket hop between one peer and the bus that passes every
// message on, except the bus's answer to a request it was told to lose.
type relay struct {
	URL string
	bus string

	// mu guards the fields below.
	mu sync.Mutex
	// method is the method whose next request's answer is lost.
	method string
	// lost is closed when that answer came and was lost.
	lost chan struct{}
	// id is that request's id, once seen.
	id string
}

func startRelay(t *testing.T, busURL string) *relay {
	r := &relay{bus: busURL}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = "ws" + strings.TrimPrefix(srv.URL, "http") + "/"
	return r
}

// loseAnswer makes the relay lose the answer to the next request for
// method; the channel is closed once it has.
func (r *relay) loseAnswer(method string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.method, r.id, r.lost = method, "", make(chan struct{})
	return r.lost
}

func (r *relay) serve(w http.ResponseWriter, req *http.Request) {
	peerWS, err := websocket.Accept(w, req, nil)
	if err != nil {
		return
	}
	defer peerWS.CloseNow()
	busWS, _, err := websocket.Dial(req.Context(), r.bus, nil)
	if err != nil {
		return
	}
	defer busWS.CloseNow()
	peerWS.SetReadLimit(-1)
	busWS.SetReadLimit(-1)
	done := make(chan struct{}, 2)
	go func() { r.pump(peerWS, busWS, r.seeRequest); done <- struct{}{} }()
	go func() { r.pump(busWS, peerWS, r.keepAnswer); done <- struct{}{} }()
	<-done
	peerWS.CloseNow()
	busWS.CloseNow()
	<-done
}

// pump copies messages from src to dst while keep says so.
func (r *relay) pump(src, dst *websocket.Conn, keep func([]byte) bool) {
	ctx := context.Background()
	for {
		typ, data, err := src.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				_ = dst.Close(ce.Code, ce.Reason)
			}
			return
		}
		if keep(data) {
			if dst.Write(ctx, typ, data) != nil {
				return
			}
		}
	}
}

type frame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// seeRequest notes the id of the request whose answer is to be lost.
func (r *relay) seeRequest(data []byte) bool {
	var f frame
	_ = json.Unmarshal(data, &f)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.method != "" && f.Method == r.method {
		r.method, r.id = "", string(f.ID)
	}
	return true
}

// keepAnswer loses the answer to the noted request.
func (r *relay) keepAnswer(data []byte) bool {
	var f frame
	_ = json.Unmarshal(data, &f)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id != "" && f.Method == "" && string(f.ID) == r.id {
		r.id = ""
		close(r.lost)
		return false
	}
	return true
}
