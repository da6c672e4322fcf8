package bcp

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// The spec's own examples, verbatim.
const (
	specCat1Example = `{
  "category": 1,
  "fields": [
    { "name": "is_urgent",   "type": "boolean" },
    { "name": "sentiment",   "type": "enum",    "values": ["positive", "neutral", "negative"] },
    { "name": "confidence",  "type": "integer",  "min": 1, "max": 5 },
    { "name": "category",    "type": "enum",    "values": ["billing", "technical", "legal", "other"] }
  ]
}`
	specCat2Example = `{
  "category": 2,
  "questions": [
    {"id": "q1", "question": "What is the sender's full name?", "max_words": 5, "expected_format": "person_name"},
    {"id": "q2", "question": "What date is the meeting scheduled for?", "max_words": 4, "expected_format": "date"},
    {"id": "q3", "question": "What are the three action items listed?", "max_words": 30, "expected_format": "short_list"}
  ]
}`
	specCat3Example = `{"category": 3, "directive": "Summarize the key findings of this document.", "max_words": 100, "requires_approval": true}`
)

func mustParse(t testing.TB, spec string) *Spec {
	t.Helper()
	s, err := ParseSpec([]byte(spec))
	if err != nil {
		t.Fatalf("ParseSpec: %v", err)
	}
	return s
}

func TestSpecCost(t *testing.T) {
	tests := []struct {
		name string
		spec string
		want float64
	}{
		{"spec Category-1 example is ~6.9 bits", specCat1Example, 1 + math.Log2(3) + math.Log2(5) + 2},
		{"4-value enum is 2 bits", `{"category":1,"fields":[{"name":"p","type":"enum","values":["low","medium","high","critical"]}]}`, 2},
		{"integer 0..255 is 8 bits", `{"category":1,"fields":[{"name":"n","type":"integer","min":0,"max":255}]}`, 8},
		{"boolean is 1 bit", `{"category":1,"fields":[{"name":"b","type":"boolean"}]}`, 1},
		{"one-value enum is 0 bits", `{"category":1,"fields":[{"name":"e","type":"enum","values":["only"]}]}`, 0},
		{"single integer is 0 bits", `{"category":1,"fields":[{"name":"n","type":"integer","min":7,"max":7}]}`, 0},
		{"full int64 range is 64 bits", `{"category":1,"fields":[{"name":"n","type":"integer","min":-9223372036854775808,"max":9223372036854775807}]}`, 64},
		{"5-word answer is 55 bits", `{"category":2,"questions":[{"id":"q","question":"?","max_words":5,"expected_format":"short_text"}]}`, 55},
		{"30-word answer is 330 bits", `{"category":2,"questions":[{"id":"q","question":"?","max_words":30,"expected_format":"short_list"}]}`, 330},
		{"spec Category-2 example", specCat2Example, 11 * (5 + 4 + 30)},
		{"spec-level max_words is the default", `{"category":2,"max_words":3,"questions":[{"id":"a","question":"?","expected_format":"short_text"},{"id":"b","question":"?","max_words":1,"expected_format":"integer"}]}`, 11 * 4},
		{"100-word summary is 1100 bits", specCat3Example, 1100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := float64(mustParse(t, tt.spec).Cost())
			if math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Cost() = %v, want %v", got, tt.want)
			}
		})
	}
	if got := mustParse(t, specCat1Example).Cost().String(); got != "6.9 bits" {
		t.Errorf("Cost().String() = %q, want 6.9 bits", got)
	}
}

func TestParseSpecRejects(t *testing.T) {
	q := func(extra string) string {
		return `{"category":2,"questions":[{"id":"q1","question":"?","max_words":5,"expected_format":"short_text"},{"id":"q2","question":"?","max_words":5,"expected_format":"short_text"},{"id":"q3","question":"?","max_words":5` + extra + `}]}`
	}
	f := func(field string) string {
		return `{"category":1,"fields":[{"name":"a","type":"boolean"},` + field + `]}`
	}
	tests := []struct {
		name, spec string
		code       Code
		path       string
	}{
		{"not JSON", `{"category":`, CodeSyntax, ""},
		{"trailing data", `{"category":3,"directive":"d","max_words":1} {}`, CodeSyntax, ""},
		{"invalid UTF-8", "{\"category\":3,\"directive\":\"\xff\",\"max_words\":1}", CodeSyntax, ""},
		{"duplicate key", `{"category":3,"category":3,"directive":"d","max_words":1}`, CodeSyntax, ""},
		{"not an object", `[]`, CodeWrongType, ""},
		{"missing category", `{"fields":[]}`, CodeMissingKey, "category"},
		{"category above 3", `{"category":4}`, CodeBadCategory, "category"},
		{"category 0", `{"category":0}`, CodeBadCategory, "category"},
		{"category as string", `{"category":"1"}`, CodeWrongType, "category"},
		{"category as float", `{"category":1.0}`, CodeWrongType, "category"},
		{"unknown top key", `{"category":1,"fields":[{"name":"a","type":"boolean"}],"extra":1}`, CodeUnknownKey, "extra"},
		{"other category's key", `{"category":1,"fields":[{"name":"a","type":"boolean"}],"questions":[]}`, CodeUnknownKey, "questions"},
		{"docs-style Category 2 with wrong category", `{"category":1,"questions":[{"id":"q1","question":"?","max_words":5,"expected_format":"short_text"}]}`, CodeUnknownKey, "questions"},
		{"no fields", `{"category":1,"fields":[]}`, CodeMissingKey, "fields"},
		{"unknown field type", f(`{"name":"b","type":"float"}`), CodeUnknownType, "fields[1].type"},
		{"unknown field key", f(`{"name":"b","type":"boolean","default":true}`), CodeUnknownKey, "fields[1].default"},
		{"values on a boolean", f(`{"name":"b","type":"boolean","values":["x"]}`), CodeUnknownKey, "fields[1].values"},
		{"min on an enum", f(`{"name":"b","type":"enum","values":["x"],"min":1}`), CodeUnknownKey, "fields[1].min"},
		{"duplicate field name", f(`{"name":"a","type":"boolean"}`), CodeDuplicate, "fields[1].name"},
		{"bad field name", f(`{"name":"a b","type":"boolean"}`), CodeInvalidValue, "fields[1].name"},
		{"empty enum", f(`{"name":"b","type":"enum","values":[]}`), CodeBadEnum, "fields[1].values"},
		{"missing enum values", f(`{"name":"b","type":"enum"}`), CodeMissingKey, "fields[1].values"},
		{"duplicate enum value", f(`{"name":"b","type":"enum","values":["x","y","x"]}`), CodeBadEnum, "fields[1].values[2]"},
		{"enum values differing by case", f(`{"name":"b","type":"enum","values":["High","high"]}`), CodeBadEnum, "fields[1].values[1]"},
		{"empty enum value", f(`{"name":"b","type":"enum","values":["x","  "]}`), CodeBadEnum, "fields[1].values[1]"},
		{"unnormalized enum value", f(`{"name":"b","type":"enum","values":["x "]}`), CodeBadEnum, "fields[1].values[0]"},
		{"non-string enum value", f(`{"name":"b","type":"enum","values":[1]}`), CodeWrongType, "fields[1].values[0]"},
		{"integer without min", f(`{"name":"b","type":"integer","max":3}`), CodeBadRange, "fields[1].min"},
		{"integer without max", f(`{"name":"b","type":"integer","min":3}`), CodeBadRange, "fields[1].max"},
		{"inverted range", f(`{"name":"b","type":"integer","min":5,"max":1}`), CodeBadRange, "fields[1]"},
		{"fractional bound", f(`{"name":"b","type":"integer","min":0.5,"max":1}`), CodeWrongType, "fields[1].min"},
		{"bound beyond int64", f(`{"name":"b","type":"integer","min":0,"max":99999999999999999999}`), CodeBadRange, "fields[1].max"},
		{"unknown format", q(`,"expected_format":"url"`), CodeUnknownFormat, "questions[2].expected_format"},
		{"missing format", q(``), CodeMissingKey, "questions[2].expected_format"},
		{"unknown question key", q(`,"expected_format":"date","hint":"x"`), CodeUnknownKey, "questions[2].hint"},
		{"duplicate question id", `{"category":2,"questions":[{"id":"q","question":"?","max_words":1,"expected_format":"date"},{"id":"q","question":"?","max_words":1,"expected_format":"date"}]}`, CodeDuplicate, "questions[1].id"},
		{"zero max_words", `{"category":2,"questions":[{"id":"q","question":"?","max_words":0,"expected_format":"date"}]}`, CodeBadMaxWords, "questions[0].max_words"},
		{"negative max_words", `{"category":2,"questions":[{"id":"q","question":"?","max_words":-3,"expected_format":"date"}]}`, CodeBadMaxWords, "questions[0].max_words"},
		{"huge max_words", `{"category":2,"questions":[{"id":"q","question":"?","max_words":1000000,"expected_format":"date"}]}`, CodeBadMaxWords, "questions[0].max_words"},
		{"no max_words anywhere", `{"category":2,"questions":[{"id":"q","question":"?","expected_format":"date"}]}`, CodeMissingKey, "questions[0].max_words"},
		{"zero max_chars", `{"category":2,"questions":[{"id":"q","question":"?","max_words":1,"max_chars":0,"expected_format":"date"}]}`, CodeBadMaxWords, "questions[0].max_chars"},
		{"empty question", `{"category":2,"questions":[{"id":"q","question":" ","max_words":1,"expected_format":"date"}]}`, CodeInvalidValue, "questions[0].question"},
		{"same_as unknown", `{"category":2,"questions":[{"id":"q","question":"?","max_words":1,"expected_format":"date","same_as":"r"}]}`, CodeInvalidValue, "questions[0].same_as"},
		{"same_as itself", `{"category":2,"questions":[{"id":"q","question":"?","max_words":1,"expected_format":"date","same_as":"q"}]}`, CodeInvalidValue, "questions[0].same_as"},
		{"same_as other format", `{"category":2,"questions":[{"id":"q","question":"?","max_words":1,"expected_format":"date"},{"id":"r","question":"?","max_words":1,"expected_format":"integer","same_as":"q"}]}`, CodeInvalidValue, "questions[1].same_as"},
		{"no questions", `{"category":2,"questions":[]}`, CodeMissingKey, "questions"},
		{"questions not a list", `{"category":2,"questions":{}}`, CodeWrongType, "questions"},
		{"requires_approval false", `{"category":3,"directive":"d","max_words":10,"requires_approval":false}`, CodeInvalidValue, "requires_approval"},
		{"requires_approval not bool", `{"category":3,"directive":"d","max_words":10,"requires_approval":"yes"}`, CodeWrongType, "requires_approval"},
		{"summary without max_words", `{"category":3,"directive":"d"}`, CodeMissingKey, "max_words"},
		{"summary with zero max_words", `{"category":3,"directive":"d","max_words":0}`, CodeBadMaxWords, "max_words"},
		{"empty directive", `{"category":3,"directive":"","max_words":10}`, CodeInvalidValue, "directive"},
		{"deep nesting", strings.Repeat("[", 100) + strings.Repeat("]", 100), CodeSyntax, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSpec([]byte(tt.spec))
			e := asError(t, err)
			if e.Code != tt.code || e.Path != tt.path {
				t.Errorf("got %s at %q (%v), want %s at %q", e.Code, e.Path, err, tt.code, tt.path)
			}
		})
	}
}

func asError(t testing.TB, err error) *Error {
	t.Helper()
	if err == nil {
		t.Fatal("got no error")
	}
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("got %T %v, want *Error", err, err)
	}
	if e.Detail == "" {
		t.Errorf("error %v has no detail", err)
	}
	return e
}

func TestParseSpecAcceptsExamples(t *testing.T) {
	for _, spec := range []string{specCat1Example, specCat2Example, specCat3Example,
		`{"category":3,"directive":"Summarize.","max_words":20}`} {
		s := mustParse(t, spec)
		if s.Category == Summary && !s.RequiresApproval {
			t.Errorf("a Category-3 spec must always require approval")
		}
		// A parsed spec marshals to JSON that parses to the same spec.
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again := mustParse(t, string(out))
		if again2, _ := json.Marshal(again); string(again2) != string(out) {
			t.Errorf("spec does not round-trip:\n%s\n%s", out, again2)
		}
	}
}

func TestCheckHandBuiltSpec(t *testing.T) {
	cases := []*Spec{
		nil,
		{},
		{Category: Structured, Fields: []Field{{Name: "n", Type: Integer}}},
		{Category: QuestionAnswer, Questions: []Question{{ID: "q", Question: "?", MaxWords: 1, ExpectedFormat: "nope"}}},
		{Category: Summary, Directive: "d", MaxWords: 0},
	}
	for i, s := range cases {
		if err := s.Check(); err == nil {
			t.Errorf("case %d: Check accepted an invalid spec", i)
		}
		if _, err := s.Validate([]byte(`{}`), ValidateOptions{}); err == nil {
			t.Errorf("case %d: Validate accepted a response to an invalid spec", i)
		}
	}
}
