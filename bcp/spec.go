package bcp

import (
	"fmt"
	"regexp"
	"strings"
)

// Category is a query's category: how much freedom the Reader's answer has.
type Category int

// The three categories of the base spec, from least to most bandwidth.
const (
	Structured     Category = 1 // typed primitives: booleans, enums, bounded integers
	QuestionAnswer Category = 2 // short answers to specific questions, with formats
	Summary        Category = 3 // a free-text summary; always needs human approval
)

// FieldType is the type of a Category-1 field.
type FieldType string

// The Category-1 field types.
const (
	Boolean FieldType = "boolean"
	Enum    FieldType = "enum"
	Integer FieldType = "integer"
)

// Format is the expected format of a Category-2 answer.
type Format string

// The Category-2 formats; docs/BCP.md gives each one's grammar.
const (
	ShortText     Format = "short_text"
	PersonName    Format = "person_name"
	Date          Format = "date"
	Email         Format = "email"
	IntegerFormat Format = "integer"
	ShortList     Format = "short_list"
)

// Limits that keep every spec's cost and every validation bounded.
const (
	MaxItems            = 256    // fields or questions in one spec
	MaxEnumValues       = 1024   // values of one enum
	MaxWordsLimit       = 10000  // the largest max_words
	MaxCharsLimit       = 100000 // the largest max_chars
	maxNameLen          = 64
	defaultCharsPerWord = 10
)

// Spec is a query or subscription spec: what the Controller asks and the
// shape the Reader's answer must have. Build one with [ParseSpec] or by
// decoding a definition; a hand-built Spec is checked by [Spec.Check] and
// again by every [Spec.Validate].
type Spec struct {
	Category Category `json:"category"`
	// Fields are Category 1's typed values, in the canonical order.
	Fields []Field `json:"fields,omitempty"`
	// Questions are Category 2's questions, in the canonical order.
	Questions []Question `json:"questions,omitempty"`
	// Directive is Category 3's summary instruction.
	Directive string `json:"directive,omitempty"`
	// MaxWords is Category 3's word limit; in Category 2 it is the default
	// for questions that declare none.
	MaxWords int `json:"max_words,omitempty"`
	// RequiresApproval is always true for Category 3 after decoding: a
	// summary is never delivered without a human's approval.
	RequiresApproval bool `json:"requires_approval,omitempty"`
}

// Field is one Category-1 value.
type Field struct {
	Name string    `json:"name"`
	Type FieldType `json:"type"`
	// Values are an enum's choices; answers match them case-insensitively
	// and are delivered as declared here.
	Values []string `json:"values,omitempty"`
	// Min and Max bound an integer, inclusive; both are required.
	Min *int64 `json:"min,omitempty"`
	Max *int64 `json:"max,omitempty"`
}

// Question is one Category-2 question.
type Question struct {
	ID       string `json:"id"`
	Question string `json:"question"`
	// MaxWords caps the answer's words; 0 means the spec's MaxWords.
	MaxWords       int    `json:"max_words,omitempty"`
	ExpectedFormat Format `json:"expected_format"`
	// MaxChars caps the answer's characters; 0 means 10 × MaxWords. It
	// exists so one giant token cannot carry a paragraph. Raising it widens
	// the channel beyond the 11-bits-per-word estimate.
	MaxChars int `json:"max_chars,omitempty"`
	// SameAs names another question asking the same thing in other words;
	// the normalized answers must agree (the spec's redundant extraction).
	SameAs string `json:"same_as,omitempty"`
}

// ParseSpec decodes a JSON query spec strictly and checks it. The error is
// the first problem found, an [*Error] naming its path.
func ParseSpec(data []byte) (*Spec, error) {
	root, err := parseJSON(data)
	if err != nil {
		return nil, newError(CodeSyntax, "", err.Error())
	}
	var d decoder
	s := d.spec(root, "")
	if len(d.errs) > 0 {
		return nil, d.errs[0]
	}
	if errs := s.check(""); len(errs) > 0 {
		return nil, errs[0]
	}
	return s, nil
}

// Check reports the first rule the spec breaks, or nil. Specs from
// [ParseSpec] and [ParseDefinition] have already passed it.
func (s *Spec) Check() error {
	if s == nil {
		return newError(CodeMissingKey, "", "no spec")
	}
	if errs := s.check(""); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// specKeys are the spec keys of each category; a key of another category is
// an error, not ignored, so a misfiled spec cannot validate nothing.
var specKeys = map[Category][]string{
	Structured:     {"category", "fields"},
	QuestionAnswer: {"category", "questions", "max_words"},
	Summary:        {"category", "directive", "max_words", "requires_approval"},
}

// spec decodes a spec object; extra are keys the caller handles (a
// subscription's id).
func (d *decoder) spec(n *node, path string, extra ...string) *Spec {
	if n.kind != kindObject {
		d.fail(n, CodeWrongType, path, "must be an object, not %s", n.kind)
		return nil
	}
	s := &Spec{}
	catNode := d.require(n, path, "category")
	if catNode == nil {
		return nil
	}
	cat, ok := d.integer(catNode, joinPath(path, "category"))
	if !ok {
		return nil
	}
	if cat < 1 || cat > 3 {
		d.fail(catNode, CodeBadCategory, joinPath(path, "category"), "category must be 1, 2 or 3, not %d", cat)
		return nil
	}
	s.Category = Category(cat)
	known := append(append([]string(nil), specKeys[s.Category]...), extra...)
	d.object(n, path, known...)
	switch s.Category {
	case Structured:
		if v := d.require(n, path, "fields"); v != nil {
			for i, item := range d.list(v, joinPath(path, "fields")) {
				s.Fields = append(s.Fields, d.field(item, indexPath(joinPath(path, "fields"), i)))
			}
		}
	case QuestionAnswer:
		if v := n.get("max_words"); v != nil {
			s.MaxWords = d.size(v, joinPath(path, "max_words"), MaxWordsLimit)
		}
		if v := d.require(n, path, "questions"); v != nil {
			for i, item := range d.list(v, joinPath(path, "questions")) {
				s.Questions = append(s.Questions, d.question(item, indexPath(joinPath(path, "questions"), i)))
			}
		}
	case Summary:
		if v := d.require(n, path, "directive"); v != nil {
			s.Directive = d.str(v, joinPath(path, "directive"))
		}
		if v := d.require(n, path, "max_words"); v != nil {
			s.MaxWords = d.size(v, joinPath(path, "max_words"), MaxWordsLimit)
		}
		s.RequiresApproval = true
		if v := n.get("requires_approval"); v != nil {
			p := joinPath(path, "requires_approval")
			if v.kind == kindBool && !v.bool {
				d.fail(v, CodeInvalidValue, p, "a Category-3 spec always requires approval; requires_approval must be true")
			} else {
				d.boolean(v, p)
			}
		}
	}
	return s
}

func (d *decoder) field(n *node, path string) Field {
	var f Field
	if n.kind != kindObject {
		d.fail(n, CodeWrongType, path, "must be an object, not %s", n.kind)
		return f
	}
	if v := d.require(n, path, "name"); v != nil {
		f.Name = d.str(v, joinPath(path, "name"))
	}
	if v := d.require(n, path, "type"); v != nil {
		f.Type = FieldType(d.str(v, joinPath(path, "type")))
	}
	switch f.Type {
	case Enum:
		d.object(n, path, "name", "type", "values")
		if v := d.require(n, path, "values"); v != nil {
			f.Values = []string{} // present but empty is reported as empty, not missing
			for i, item := range d.list(v, joinPath(path, "values")) {
				f.Values = append(f.Values, d.str(item, indexPath(joinPath(path, "values"), i)))
			}
		}
	case Integer:
		d.object(n, path, "name", "type", "min", "max")
		for _, key := range []string{"min", "max"} {
			if v := n.get(key); v != nil {
				if x, ok := d.integer(v, joinPath(path, key)); ok {
					if key == "min" {
						f.Min = &x
					} else {
						f.Max = &x
					}
				}
			}
		}
	default:
		d.object(n, path, "name", "type")
	}
	return f
}

func (d *decoder) question(n *node, path string) Question {
	var q Question
	if !d.object(n, path, "id", "question", "max_words", "expected_format", "max_chars", "same_as") {
		return q
	}
	if v := d.require(n, path, "id"); v != nil {
		q.ID = d.str(v, joinPath(path, "id"))
	}
	if v := d.require(n, path, "question"); v != nil {
		q.Question = d.str(v, joinPath(path, "question"))
	}
	if v := n.get("max_words"); v != nil {
		q.MaxWords = d.size(v, joinPath(path, "max_words"), MaxWordsLimit)
	}
	if v := d.require(n, path, "expected_format"); v != nil {
		q.ExpectedFormat = Format(d.str(v, joinPath(path, "expected_format")))
	}
	if v := n.get("max_chars"); v != nil {
		q.MaxChars = d.size(v, joinPath(path, "max_chars"), MaxCharsLimit)
	}
	if v := n.get("same_as"); v != nil {
		q.SameAs = d.str(v, joinPath(path, "same_as"))
	}
	return q
}

// namePattern is what field names and question ids may look like: they
// become keys of the JSON the Controller reads.
var namePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// check reports every semantic rule the spec breaks, with paths under path.
func (s *Spec) check(path string) []*Error {
	var errs []*Error
	fail := func(code Code, p, format string, args ...any) {
		errs = append(errs, newError(code, p, fmt.Sprintf(format, args...)))
	}
	switch s.Category {
	case Structured:
		p := joinPath(path, "fields")
		if len(s.Questions) > 0 || s.Directive != "" || s.MaxWords != 0 {
			fail(CodeUnknownKey, path, "a Category-1 spec has only fields")
		}
		if !checkNames(&errs, p, "name", "field", names(s.Fields, func(f Field) string { return f.Name })) {
			return errs
		}
		for i := range s.Fields {
			errs = append(errs, s.Fields[i].check(indexPath(p, i))...)
		}
	case QuestionAnswer:
		p := joinPath(path, "questions")
		if len(s.Fields) > 0 || s.Directive != "" {
			fail(CodeUnknownKey, path, "a Category-2 spec has only questions and max_words")
		}
		if !checkNames(&errs, p, "id", "question", names(s.Questions, func(q Question) string { return q.ID })) {
			return errs
		}
		if s.MaxWords != 0 {
			checkCount(&errs, joinPath(path, "max_words"), "max_words", s.MaxWords, MaxWordsLimit)
		}
		formats := map[string]Format{}
		for _, q := range s.Questions {
			formats[q.ID] = q.ExpectedFormat
		}
		for i, q := range s.Questions {
			qp := indexPath(p, i)
			if strings.TrimSpace(q.Question) == "" {
				fail(CodeInvalidValue, joinPath(qp, "question"), "question must not be empty")
			}
			if q.MaxWords == 0 && s.MaxWords == 0 {
				fail(CodeMissingKey, joinPath(qp, "max_words"), "required key \"max_words\" is missing (in the question or the spec)")
			} else if q.MaxWords != 0 {
				checkCount(&errs, joinPath(qp, "max_words"), "max_words", q.MaxWords, MaxWordsLimit)
			}
			if !knownFormat(q.ExpectedFormat) {
				fail(CodeUnknownFormat, joinPath(qp, "expected_format"), "unknown format %q (want short_text, person_name, date, email, integer or short_list)", truncate(string(q.ExpectedFormat), maxNameLen))
			}
			if q.MaxChars != 0 {
				checkCount(&errs, joinPath(qp, "max_chars"), "max_chars", q.MaxChars, MaxCharsLimit)
			}
			if q.SameAs != "" {
				sp := joinPath(qp, "same_as")
				format, ok := formats[q.SameAs]
				switch {
				case q.SameAs == q.ID:
					fail(CodeInvalidValue, sp, "a question cannot be the same as itself")
				case !ok:
					fail(CodeInvalidValue, sp, "no question with id %q", truncate(q.SameAs, maxNameLen))
				case format != q.ExpectedFormat:
					fail(CodeInvalidValue, sp, "question %q has format %q, not %q; only answers of one format can be compared", q.SameAs, format, q.ExpectedFormat)
				}
			}
		}
	case Summary:
		if len(s.Fields) > 0 || len(s.Questions) > 0 {
			fail(CodeUnknownKey, path, "a Category-3 spec has only directive, max_words and requires_approval")
		}
		if strings.TrimSpace(s.Directive) == "" {
			fail(CodeInvalidValue, joinPath(path, "directive"), "directive must not be empty")
		}
		checkCount(&errs, joinPath(path, "max_words"), "max_words", s.MaxWords, MaxWordsLimit)
	default:
		fail(CodeBadCategory, joinPath(path, "category"), "category must be 1, 2 or 3, not %d", s.Category)
	}
	return errs
}

// checkNames checks the list of a spec's field names or question ids:
// present, within MaxItems, well formed and unique. It reports false when
// the list is too long to check further.
func checkNames(errs *[]*Error, path, key, noun string, names []string) bool {
	fail := func(code Code, p, format string, args ...any) {
		*errs = append(*errs, newError(code, p, fmt.Sprintf(format, args...)))
	}
	switch {
	case len(names) == 0:
		fail(CodeMissingKey, path, "the spec needs at least one %s", noun)
		return true
	case len(names) > MaxItems:
		fail(CodeInvalidValue, path, "at most %d %ss", MaxItems, noun)
		return false
	}
	seen := map[string]bool{}
	for i, name := range names {
		p := joinPath(indexPath(path, i), key)
		switch {
		case name == "":
			fail(CodeInvalidValue, p, "%s %s must not be empty", noun, key)
		case len(name) > maxNameLen || !namePattern.MatchString(name):
			fail(CodeInvalidValue, p, "%s %s %q must be a letter followed by letters, digits, '_' or '-', at most %d characters", noun, key, truncate(name, maxNameLen), maxNameLen)
		case seen[name]:
			fail(CodeDuplicate, p, "duplicate %s %s %q", noun, key, name)
		}
		seen[name] = true
	}
	return true
}

func names[T any](items []T, name func(T) string) []string {
	out := make([]string, len(items))
	for i, item := range items {
		out[i] = name(item)
	}
	return out
}

func checkCount(errs *[]*Error, path, what string, v, limit int) {
	if v <= 0 || v > limit {
		*errs = append(*errs, newError(CodeBadMaxWords, path, fmt.Sprintf("%s must be between 1 and %d, not %d", what, limit, v)))
	}
}

func (f *Field) check(path string) []*Error {
	var errs []*Error
	fail := func(code Code, p, format string, args ...any) {
		errs = append(errs, newError(code, p, fmt.Sprintf(format, args...)))
	}
	switch f.Type {
	case Boolean:
	case Enum:
		p := joinPath(path, "values")
		if len(f.Values) == 0 {
			fail(CodeBadEnum, p, "an enum needs at least one value")
		}
		if len(f.Values) > MaxEnumValues {
			fail(CodeBadEnum, p, "at most %d enum values", MaxEnumValues)
			return errs
		}
		seen := map[string]int{}
		for i, v := range f.Values {
			vp := indexPath(p, i)
			key := foldKey(v)
			switch {
			case strings.TrimSpace(v) == "" || key == "":
				fail(CodeBadEnum, vp, "enum values must not be empty")
			case normalizeText(v, false) != v:
				fail(CodeBadEnum, vp, "enum value %q must be written in normal form (NFKC, no control characters, single spaces, trimmed)", truncate(v, maxNameLen))
			default:
				if j, dup := seen[key]; dup {
					fail(CodeBadEnum, vp, "enum value %q repeats values[%d] (values match case-insensitively)", truncate(v, maxNameLen), j)
				} else {
					seen[key] = i
				}
			}
		}
	case Integer:
		switch {
		case f.Min == nil:
			fail(CodeBadRange, joinPath(path, "min"), "an integer field needs min")
		case f.Max == nil:
			fail(CodeBadRange, joinPath(path, "max"), "an integer field needs max")
		case *f.Min > *f.Max:
			fail(CodeBadRange, path, "min %d is above max %d", *f.Min, *f.Max)
		}
	case "":
		fail(CodeUnknownType, joinPath(path, "type"), "field type must not be empty")
	default:
		fail(CodeUnknownType, joinPath(path, "type"), "unknown field type %q (want boolean, enum or integer)", truncate(string(f.Type), maxNameLen))
	}
	if f.Type != Enum && f.Values != nil {
		fail(CodeUnknownKey, joinPath(path, "values"), "only an enum has values")
	}
	if f.Type != Integer && (f.Min != nil || f.Max != nil) {
		fail(CodeUnknownKey, path, "only an integer has min and max")
	}
	return errs
}

func knownFormat(f Format) bool {
	switch f {
	case ShortText, PersonName, Date, Email, IntegerFormat, ShortList:
		return true
	}
	return false
}

// questionMaxWords is q's word limit, falling back to the spec's default.
func (s *Spec) questionMaxWords(q *Question) int {
	if q.MaxWords != 0 {
		return q.MaxWords
	}
	return s.MaxWords
}

// questionMaxChars is q's character cap.
func (s *Spec) questionMaxChars(q *Question) int {
	if q.MaxChars != 0 {
		return q.MaxChars
	}
	return defaultCharsPerWord * s.questionMaxWords(q)
}
