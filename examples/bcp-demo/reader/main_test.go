package main

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/bub-bus/bub/bcp"
)

// The demo's definitions load, and the scripted Reader's answers to the
// demo's specs are what the README says: valid where the walkthrough
// shows a delivery, too long where it shows a rejection.
func TestDemoAnswers(t *testing.T) {
	if _, err := bcp.LoadDefinitions("../agents"); err != nil {
		t.Fatalf("demo definitions: %v", err)
	}
	for file, wantCode := range map[string]bcp.Code{
		"cat1.json": "", "cat2.json": "", "strict.json": bcp.CodeTooManyWords, "summary.json": "",
	} {
		data, err := os.ReadFile("../specs/" + file)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := bcp.ParseSpec(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		resp, _ := json.Marshal(answer(spec))
		_, err = spec.Validate(resp, bcp.ValidateOptions{})
		if bcp.CodeOf(err) != wantCode {
			t.Errorf("%s: the reader's answer gives %v, want code %q", file, err, wantCode)
		}
	}
}
