package bcp

import (
	"errors"
	"strconv"
	"strings"
)

// Code is the stable, machine-readable reason of an [*Error]. Gateways and
// SDKs switch on it; the wording of Error.Detail may change, codes do not.
type Code string

// Response rejections, returned by [Spec.Validate].
const (
	CodeMalformed           Code = "malformed"            // not a JSON object, invalid UTF-8, duplicate key, too large
	CodeMissingField        Code = "missing_field"        // a declared field or question has no answer
	CodeUnexpectedField     Code = "unexpected_field"     // a key the spec does not declare
	CodeWrongType           Code = "wrong_type"           // the JSON type differs from the declared one
	CodeOutOfRange          Code = "out_of_range"         // an integer outside [min, max]
	CodeNotInEnum           Code = "not_in_enum"          // a string that is none of the enum's values
	CodeTooManyWords        Code = "too_many_words"       // more words than max_words
	CodeTooLong             Code = "too_long"             // more characters than the character cap
	CodeBadFormat           Code = "bad_format"           // an answer that does not match its expected_format
	CodeInconsistentAnswers Code = "inconsistent_answers" // same_as answers that differ after normalization
	CodeAnomaly             Code = "anomaly"              // an anomaly under the reject policy
	CodeMixedScript         Code = "mixed_script"         // a word whose letters come from two scripts
)

// Spec and definition errors, returned by [ParseSpec], [Spec.Check],
// [ParseDefinition], [CheckDefinitions] and [LoadDefinitions].
const (
	CodeSyntax           Code = "syntax"             // not JSON or YAML, or no front matter
	CodeUnknownKey       Code = "unknown_key"        // a key the schema does not have
	CodeMissingKey       Code = "missing_key"        // a required key is absent
	CodeBadCategory      Code = "bad_category"       // a category that is not 1, 2 or 3
	CodeUnknownType      Code = "unknown_type"       // a field type other than boolean, enum, integer
	CodeUnknownFormat    Code = "unknown_format"     // an expected_format the validator does not know
	CodeBadEnum          Code = "bad_enum"           // empty, duplicate or unnormalized enum values
	CodeBadRange         Code = "bad_range"          // missing or inverted min/max
	CodeBadMaxWords      Code = "bad_max_words"      // max_words or max_chars not positive or too large
	CodeDuplicate        Code = "duplicate"          // a repeated field name, question id, subscription id, channel or agent name
	CodeInvalidValue     Code = "invalid_value"      // any other value the schema does not allow
	CodeCategoryAboveMax Code = "category_above_max" // a subscription above its channel's max_category
	CodeNoPeerChannel    Code = "no_peer_channel"    // a channel whose peer lacks the matching channel back
)

// Budget and registry errors, returned by [Budget.Charge] and
// [Registry.Subscription].
const (
	CodeBudgetExhausted      Code = "budget_exhausted"       // the charge exceeds the remaining bits
	CodeCat2QueriesExhausted Code = "cat2_queries_exhausted" // max_cat2_queries reached
	CodeCat3QueriesExhausted Code = "cat3_queries_exhausted" // max_cat3_queries reached
	CodeCategoryNotAllowed   Code = "category_not_allowed"   // a category above the channel's max_category
	CodeSubscriptionNotFound Code = "subscription_not_found" // no subscription for (reader, controller, id)
)

// Error is a rejection by this package. Path locates the offending value in
// the document that was checked: a key of the response (q1), a spec path
// (questions[2].expected_format) or a definition path
// (bcp_channels[0].subscriptions[1].category). File and Line are set for
// definitions; Line is 0 where the YAML library gives no position.
type Error struct {
	Code   Code   `json:"code"`
	Path   string `json:"path,omitempty"`
	Detail string `json:"detail"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
}

// Error formats the error as "file:line: path: detail (code)", leaving out
// the parts that are not set.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Detail)
	b.WriteString(" (")
	b.WriteString(string(e.Code))
	b.WriteByte(')')
	return b.String()
}

// CodeOf returns the code of the first [*Error] in err's chain, or "" if
// there is none, so callers can map any error to a wire code in one place.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Errors is every problem found in a set of definitions: checking stops at
// nothing so an operator can fix a directory in one pass.
type Errors []*Error

// Error joins the errors, one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes the individual errors to errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func newError(code Code, path, detail string) *Error {
	return &Error{Code: code, Path: path, Detail: detail}
}

// joinPath appends a key to a path: "" + "fields" is "fields",
// "fields[0]" + "type" is "fields[0].type".
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// indexPath appends a list index: "fields" + 2 is "fields[2]".
func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}
