package a2a

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
)

// FuzzParseRequest: any body gets a request or a JSON-RPC error with a
// code of the table, never a panic; a request has a method and a valid
// id.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}`,
		`{"jsonrpc":"2.0","id":"a","method":"SendMessage"}`,
		`[{"jsonrpc":"2.0"}]`, `{`, ``, `{"jsonrpc":"2.0","id":{},"method":"x"}`,
		`{"jsonrpc":"2.0","id":1,"method":3}`, `{} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parseRequest(body)
		if err != nil {
			if _, ok := reasons[err.Code]; !ok {
				t.Fatalf("code %d is not in the table", err.Code)
			}
			return
		}
		if req.Method == "" || req.JSONRPC != "2.0" || !validID(req.ID) {
			t.Fatalf("accepted %+v", req)
		}
	})
}

// FuzzParseLastEventID: a header is a sequence number that prints back
// as itself, or an error naming the header.
func FuzzParseLastEventID(f *testing.F) {
	for _, s := range []string{"", "0", "17", " 3 ", "-1", "x", "18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		n, given, err := parseLastEventID(h)
		switch {
		case err != nil:
			if !strings.Contains(err.Message, "Last-Event-ID") {
				t.Fatalf("error %q does not name the header", err.Message)
			}
		case given && strconv.FormatUint(n, 10) != strings.TrimLeft(strings.TrimSpace(h), "+0") && n != 0:
			t.Fatalf("%q read as %d", h, n)
		case !given && strings.TrimSpace(h) != "":
			t.Fatalf("%q read as absent", h)
		}
	})
}

// FuzzAnswer: whatever an agent publishes on a task's reply topic makes
// events of that task, or an error, never a panic, and never moves the
// task to a state outside the specification's.
func FuzzAnswer(f *testing.F) {
	for _, s := range []string{
		`{"type":"plaintext_message","text":"hi"}`,
		`{"type":"a2a_status","state":"input-required","text":"?"}`,
		`{"type":"a2a_status","state":"bogus"}`,
		`{"type":"a2a_artifact","artifact":{"artifactId":"a","parts":[{"text":"x"}]},"append":true}`,
		`{"type":"a2a_artifact","artifact":{"parts":[]}}`,
		`{"type":"other","n":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ans answer
		if json.Unmarshal(raw, &ans) != nil {
			return
		}
		rec := &taskRecord{Task: spec.Task{ID: "t", ContextID: "c", Status: spec.TaskStatus{State: spec.TaskStateWorking}}}
		evs, err := answerEvents(rec, &ans, raw)
		if err != nil {
			return
		}
		if len(evs) != 1 {
			t.Fatalf("%d events", len(evs))
		}
		if _, err := parseState(string(rec.Task.Status.State)); err != nil {
			t.Fatalf("state %q: %v", rec.Task.Status.State, err)
		}
		for _, ev := range evs {
			if ev.(interface{ TaskInfo() spec.TaskInfo }).TaskInfo().TaskID != "t" {
				t.Fatalf("event of another task: %+v", ev)
			}
		}
	})
}

// FuzzPageToken: a pageToken the client sends is a cursor or refused,
// never a panic, and a cursor this server made reads back as itself.
func FuzzPageToken(f *testing.F) {
	f.Add(pageToken(listKey{at: 1765000000000000000, id: "01a2520c-846a-7299-98a1-4225f6fe1241"}))
	f.Add("")
	f.Add("!!")
	f.Add("MTIzfA")
	f.Fuzz(func(t *testing.T, tok string) {
		k, ok := parsePageToken(tok)
		if !ok {
			return
		}
		if back, ok := parsePageToken(pageToken(k)); !ok || back != k {
			t.Fatalf("%q read as %+v, which writes back as %+v", tok, k, back)
		}
	})
}
