package bcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxResponseBytes bounds the raw response Validate will read. The largest
// answer a valid spec allows is far smaller; the bound stops a hostile
// Reader from making the gateway parse megabytes to reject them.
const MaxResponseBytes = 1 << 20

// ValidateOptions tune [Spec.Validate]. The zero value is the default.
type ValidateOptions struct {
	// Anomalies is the anomaly policy; the zero value is FlagAnomalies.
	Anomalies AnomalyPolicy
}

// Result is an accepted response, the only thing a Controller may read.
type Result struct {
	Category Category `json:"category"`
	// Response is the normalized response in the flat shape: keys in the
	// spec's order, text normalized, integers in canonical decimal. It
	// re-validates to itself.
	Response json.RawMessage `json:"response"`
	// DeclaredBits is the spec's cost, charged before the query was sent.
	DeclaredBits Bits `json:"declared_bits"`
	// MeasuredBits is what this response carries: the declared bits in
	// Category 1 (every value uses its field's full range), 11 bits per
	// word actually answered in Categories 2 and 3.
	MeasuredBits Bits `json:"measured_bits"`
	// Anomalies are flagged traits of the text answers; never nil. They
	// carry nothing a Controller could not compute from Response, except
	// one bit per answer: whether it held invisible characters.
	Anomalies []Anomaly `json:"anomalies"`
	// Evidence is what the anomalies found in the raw answers (the code
	// points of invisible characters). It is for the audit log and the
	// Reader: a Controller must never see it.
	Evidence []Evidence `json:"evidence,omitempty"`
	// RequiresApproval is true for Category 3: a human must approve the
	// summary before the Controller sees it.
	RequiresApproval bool `json:"requires_approval"`
}

// member is one answer of the response in the flat shape.
type member struct {
	key  string
	path string // where the answer sits in the raw response
	val  *node
}

// Validate checks a Reader's response against the spec and returns its
// normalized form. The response is a JSON object in the flat shape
// ({"field": value}, {"question_id": "answer"}, {"summary": "text"}) or the
// BCPRespond shape ({"fields": {...}}, {"answers": [{"id", "answer"}]}).
// Any rejection is an [*Error] with a response code; a spec that breaks a
// rule yields that spec's error. Validate never panics and is safe to call
// concurrently on one Spec.
func (s *Spec) Validate(response []byte, opts ValidateOptions) (*Result, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	if len(response) > MaxResponseBytes {
		return nil, newError(CodeTooLong, "", fmt.Sprintf("response is %d bytes, at most %d allowed", len(response), MaxResponseBytes))
	}
	root, err := parseJSON(response)
	if err != nil {
		return nil, newError(CodeMalformed, "", "response is not valid JSON: "+err.Error())
	}
	if root.kind != kindObject {
		return nil, newError(CodeMalformed, "", "response must be a JSON object, not "+root.kind.String())
	}
	members, verr := s.flatten(root)
	if verr != nil {
		return nil, verr
	}
	res := &Result{Category: s.Category, DeclaredBits: s.Cost(), Anomalies: []Anomaly{}, RequiresApproval: s.Category == Summary}
	var out jsonObject
	switch s.Category {
	case Structured:
		verr = s.validateFields(members, &out)
		res.MeasuredBits = res.DeclaredBits
	case QuestionAnswer:
		verr = s.validateAnswers(members, &out, res)
	case Summary:
		verr = s.validateSummary(members, &out, res)
	}
	if verr != nil {
		return nil, verr
	}
	if opts.Anomalies == RejectAnomalies && len(res.Anomalies) > 0 {
		a := res.Anomalies[0]
		detail := a.Excerpt
		for _, e := range res.Evidence {
			if e.Question == a.Question && e.Kind == a.Kind {
				detail = e.Detail
			}
		}
		// The error goes back to the Reader, who wrote what it quotes.
		return nil, newError(CodeAnomaly, a.Question, fmt.Sprintf("%s: %s", a.Kind, detail))
	}
	res.Response = out.bytes()
	return res, nil
}

// flatten turns either response shape into the flat list of answers,
// rejecting duplicate answers and any key the spec does not declare.
func (s *Spec) flatten(root *node) ([]member, *Error) {
	declared := s.keys()
	var members []member
	switch {
	case s.Category == Structured && isWrapper(root, "fields", kindObject) && !declared["fields"]:
		inner := root.vals[0]
		for i, k := range inner.keys {
			members = append(members, member{key: k, path: joinPath("fields", k), val: inner.vals[i]})
		}
	case s.Category == QuestionAnswer && isWrapper(root, "answers", kindArray) && !declared["answers"]:
		seen := map[string]bool{}
		for i, item := range root.vals[0].items {
			p := indexPath("answers", i)
			if item.kind != kindObject || len(item.keys) != 2 || item.get("id") == nil || item.get("answer") == nil {
				return nil, newError(CodeMalformed, p, `each answer must be an object with exactly "id" and "answer"`)
			}
			id := item.get("id")
			if id.kind != kindString {
				return nil, newError(CodeWrongType, joinPath(p, "id"), "must be a string, not "+id.kind.String())
			}
			if seen[id.text] {
				return nil, newError(CodeMalformed, joinPath(p, "id"), fmt.Sprintf("question %q is answered twice", truncate(id.text, maxNameLen)))
			}
			seen[id.text] = true
			members = append(members, member{key: id.text, path: joinPath(p, "answer"), val: item.get("answer")})
		}
	default:
		for i, k := range root.keys {
			members = append(members, member{key: k, path: k, val: root.vals[i]})
		}
	}
	for _, m := range members {
		if !declared[m.key] {
			return nil, newError(CodeUnexpectedField, m.path, fmt.Sprintf("%q is not declared by the spec", truncate(m.key, maxNameLen)))
		}
	}
	return members, nil
}

// isWrapper reports whether n is {key: <value of kind k>} and nothing else.
func isWrapper(n *node, key string, k kind) bool {
	return len(n.keys) == 1 && n.keys[0] == key && n.vals[0].kind == k
}

// keys are the response keys the spec declares.
func (s *Spec) keys() map[string]bool {
	keys := map[string]bool{}
	switch s.Category {
	case Structured:
		for _, f := range s.Fields {
			keys[f.Name] = true
		}
	case QuestionAnswer:
		for _, q := range s.Questions {
			keys[q.ID] = true
		}
	case Summary:
		keys["summary"] = true
	}
	return keys
}

func find(members []member, key string) *member {
	for i := range members {
		if members[i].key == key {
			return &members[i]
		}
	}
	return nil
}

func (s *Spec) validateFields(members []member, out *jsonObject) *Error {
	for i := range s.Fields {
		f := &s.Fields[i]
		m := find(members, f.Name)
		if m == nil {
			return newError(CodeMissingField, f.Name, "no value for field "+strconv.Quote(f.Name)+" (Category 1 has no optional fields)")
		}
		v := m.val
		switch f.Type {
		case Boolean:
			if v.kind != kindBool {
				return newError(CodeWrongType, m.path, "must be true or false, not "+describe(v))
			}
			out.add(f.Name, strconv.FormatBool(v.bool))
		case Integer:
			if v.kind != kindNumber || !isIntegerLiteral(v.text) {
				return newError(CodeWrongType, m.path, "must be an integer, not "+describe(v))
			}
			n, err := strconv.ParseInt(v.text, 10, 64)
			if err != nil || n < *f.Min || n > *f.Max {
				return newError(CodeOutOfRange, m.path, fmt.Sprintf("must be between %d and %d", *f.Min, *f.Max))
			}
			out.add(f.Name, strconv.FormatInt(n, 10))
		case Enum:
			if v.kind != kindString {
				return newError(CodeWrongType, m.path, "must be a string, not "+describe(v))
			}
			value, ok := matchEnum(f.Values, v.text)
			if !ok {
				return newError(CodeNotInEnum, m.path, "must be one of "+quoteList(f.Values))
			}
			out.addString(f.Name, value)
		}
	}
	return nil
}

// matchEnum finds the declared value an answer names, case-insensitively
// after normalization.
func matchEnum(values []string, answer string) (string, bool) {
	key := foldKey(answer)
	for _, v := range values {
		if foldKey(v) == key {
			return v, true
		}
	}
	return "", false
}

func (s *Spec) validateAnswers(members []member, out *jsonObject, res *Result) *Error {
	answers := make(map[string]string, len(s.Questions))
	for i := range s.Questions {
		q := &s.Questions[i]
		m := find(members, q.ID)
		if m == nil {
			return newError(CodeMissingField, q.ID, "no answer for question "+strconv.Quote(q.ID))
		}
		text, err := checkText(m, q.ExpectedFormat, s.questionMaxWords(q), s.questionMaxChars(q))
		if err != nil {
			return err
		}
		answers[q.ID] = text
		res.MeasuredBits += BitsPerWord * Bits(countWords(text))
		res.addAnomalies(detectAnomalies(q.ID, m.val.text, text, q.ExpectedFormat == Email))
		out.addString(q.ID, text)
	}
	for i := range s.Questions {
		q := &s.Questions[i]
		if q.SameAs != "" && answers[q.ID] != answers[q.SameAs] {
			return newError(CodeInconsistentAnswers, q.ID, fmt.Sprintf("the answer differs from the answer to %q, which asks the same", q.SameAs))
		}
	}
	return nil
}

func (s *Spec) validateSummary(members []member, out *jsonObject, res *Result) *Error {
	m := find(members, "summary")
	if m == nil {
		return newError(CodeMissingField, "summary", "no summary")
	}
	text, err := checkText(m, ShortText, s.MaxWords, defaultCharsPerWord*s.MaxWords)
	if err != nil {
		return err
	}
	res.MeasuredBits = BitsPerWord * Bits(countWords(text))
	res.addAnomalies(detectAnomalies("summary", m.val.text, text, false))
	out.addString("summary", text)
	return nil
}

func (r *Result) addAnomalies(anomalies []Anomaly, evidence []Evidence) {
	r.Anomalies = append(r.Anomalies, anomalies...)
	r.Evidence = append(r.Evidence, evidence...)
}

// checkText normalizes a text answer, puts it in its format's canonical
// form, and enforces the word and character caps on that form, so the
// result passes the same checks again.
func checkText(m *member, f Format, maxWords, maxChars int) (string, *Error) {
	if m.val.kind != kindString {
		return "", newError(CodeWrongType, m.path, "must be a string, not "+describe(m.val))
	}
	text := normalizeText(m.val.text, true)
	if text == "" {
		return "", newError(CodeBadFormat, m.path, "the answer is empty")
	}
	text, why := canonicalAnswer(f, text)
	if why != "" {
		return "", newError(CodeBadFormat, m.path, why)
	}
	if n := countWords(text); n > maxWords {
		return "", newError(CodeTooManyWords, m.path, fmt.Sprintf("%d words, at most %d allowed", n, maxWords))
	}
	if n := utf8.RuneCountInString(text); n > maxChars {
		return "", newError(CodeTooLong, m.path, fmt.Sprintf("%d characters, at most %d allowed", n, maxChars))
	}
	// A word of two scripts (a Cyrillic "а" in a Latin "pаypal") looks
	// like a word of one, and would reach the Controller in bytes a human
	// cannot tell apart, a bit per look-alike letter the budget does not
	// charge. No normalization can pick the intended letter, so such an
	// answer is refused under every anomaly policy.
	if word := mixedScriptWord(text); word != "" {
		return "", newError(CodeMixedScript, m.path, fmt.Sprintf("the word %q mixes letters of two scripts; write each word in one script", truncate(word, 48)))
	}
	return text, nil
}

func quoteList(values []string) string {
	var b bytes.Buffer
	for i, v := range values {
		if i == 8 {
			fmt.Fprintf(&b, ", … (%d in all)", len(values))
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(truncate(v, maxNameLen)))
	}
	return b.String()
}

// jsonObject writes a JSON object with keys in insertion order, which
// encoding/json's maps cannot.
type jsonObject struct {
	buf bytes.Buffer
}

// add appends a member whose value is already JSON.
func (o *jsonObject) add(key, rawValue string) {
	if o.buf.Len() == 0 {
		o.buf.WriteByte('{')
	} else {
		o.buf.WriteByte(',')
	}
	o.buf.Write(marshalString(key))
	o.buf.WriteByte(':')
	o.buf.WriteString(rawValue)
}

func (o *jsonObject) addString(key, value string) {
	o.add(key, string(marshalString(value)))
}

func (o *jsonObject) bytes() json.RawMessage {
	if o.buf.Len() == 0 {
		return json.RawMessage("{}")
	}
	return append(o.buf.Bytes(), '}')
}

func marshalString(s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}
