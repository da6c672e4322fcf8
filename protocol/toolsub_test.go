package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestParseSubscriptionEvent: the seed's fields and their types, each
// error naming the field at fault.
func TestParseSubscriptionEvent(t *testing.T) {
	tests := []struct {
		body string
		want string // the error, "" for none
	}{
		{`{"type":"subscription_event","group_id":"g","tool_call_id":"c","text":"t"}`, ""},
		{`{"type":"subscription_event","group_id":"g","tool_call_id":"c","text":"","associative":true,"final":false,"extra":1}`, ""},
		{` {"type":"subscription_event","group_id":"g","tool_call_id":"c","text":"t"}` + "\n", ""},
		{``, "not valid JSON"},
		{`{"type":"subscription_event"`, "not valid JSON"},
		{`null`, "must be a JSON object"},
		{`{"group_id":"g","tool_call_id":"c","text":"t"}`, "type is required"},
		{`{"type":"tool_result","group_id":"g","tool_call_id":"c","text":"t"}`, `type must be "subscription_event"`},
		{`{"type":"subscription_event","tool_call_id":"c","text":"t"}`, "group_id is required"},
		{`{"type":"subscription_event","group_id":"","tool_call_id":"c","text":"t"}`, "group_id must not be empty"},
		{`{"type":"subscription_event","group_id":["g"],"tool_call_id":"c","text":"t"}`, "group_id must be a string"},
		{`{"type":"subscription_event","group_id":"g","tool_call_id":7,"text":"t"}`, "tool_call_id must be a string"},
		{`{"type":"subscription_event","group_id":"g","tool_call_id":"c"}`, "text is required"},
		{`{"type":"subscription_event","group_id":"g","tool_call_id":"c","text":{"a":1}}`, "text must be a string"},
		{`{"type":"subscription_event","group_id":"g","tool_call_id":"c","text":"t","final":1}`, "final must be a boolean"},
		{`{"type":"subscription_event","group_id":"g","tool_call_id":"c","text":"t","associative":"true"}`, "associative must be a boolean"},
		{`{"type":"subscription_event","group_id":"g","tool_call_id":"c","text":"t","Final":true}`, "Final: the field is final, in lower case"},
		{`{"type":"subscription_event","group_id":"` + strings.Repeat("g", 257) + `","tool_call_id":"c","text":"t"}`, "group_id is longer than 256 bytes"},
	}
	for _, tt := range tests {
		ev, err := ParseSubscriptionEvent([]byte(tt.body))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.body, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v; want one with %q", tt.body, err, tt.want)
		case tt.want == "" && (ev.Type != TypeSubscriptionEvent || ev.GroupID != "g" || ev.ToolCallID != "c"):
			t.Errorf("%s: parsed %+v", tt.body, ev)
		}
	}
}

// FuzzParseSubscriptionEvent feeds callback bodies to the parser: it
// never panics, and an event it takes has the seed's required fields and
// reads the same when written again and parsed back.
func FuzzParseSubscriptionEvent(f *testing.F) {
	for _, seed := range []string{
		`{"type":"subscription_event","group_id":"g","tool_call_id":"c","text":"t"}`,
		`{"type":"subscription_event","group_id":"g","tool_call_id":"c","text":"","associative":true,"final":true}`,
		`{"type":"subscription_event","group_id":"g","group_id":"h","tool_call_id":"c","text":"t"}`,
		`{"type":"subscription_event","group_id":"g\u0000","tool_call_id":"c","text":"\ud800"}`,
		`{"type":`, `[1]`, `null`, `""`, `{}`, `{"final":null}`, `{"type":"subscription_event","group_id":"g","tool_call_id":"c","text":"t","Final":true}`, "{\"text\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := ParseSubscriptionEvent(body)
		if err != nil {
			return
		}
		if ev.Type != TypeSubscriptionEvent || ev.GroupID == "" || ev.ToolCallID == "" ||
			len(ev.GroupID) > MaxToolSubscriptionIDBytes || len(ev.ToolCallID) > MaxToolSubscriptionIDBytes {
			t.Fatalf("took %q as %+v", body, ev)
		}
		var want SubscriptionEvent
		if err := json.Unmarshal(body, &want); err != nil || want != *ev {
			t.Fatalf("%q: parsed %+v; json.Unmarshal reads %+v (%v)", body, ev, want, err)
		}
		again, _ := json.Marshal(ev)
		back, err := ParseSubscriptionEvent(again)
		if err != nil || *back != *ev {
			t.Fatalf("%q: written again as %s, parsed back %+v, %v", body, again, back, err)
		}
	})
}
