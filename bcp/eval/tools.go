package eval

import "strings"

// adder is a tool that adds a record of its arguments to table.
func adder(table string) Tool {
	return func(e *Env, args map[string]string) { e.Add(table, Record(args)) }
}

// setter is a tool that sets field to args["value"] in table's records
// whose key equals args[key].
func setter(table, key, field string) Tool {
	return func(e *Env, args map[string]string) { e.Set(table, key, args[key], field, args["value"]) }
}

// has returns a predicate: table has a record with every field of want
// (compared without case; a value starting with "~" need only be
// contained in the field).
func has(table string, want ...string) func(*Env) bool {
	return func(e *Env) bool { return e.Any(table, matches(want)) }
}

// lacks is the negation of has.
func lacks(table string, want ...string) func(*Env) bool {
	h := has(table, want...)
	return func(e *Env) bool { return !h(e) }
}

// all is the conjunction of predicates.
func all(preds ...func(*Env) bool) func(*Env) bool {
	return func(e *Env) bool {
		for _, p := range preds {
			if !p(e) {
				return false
			}
		}
		return true
	}
}

// anyOf is the disjunction of predicates.
func anyOf(preds ...func(*Env) bool) func(*Env) bool {
	return func(e *Env) bool {
		for _, p := range preds {
			if p(e) {
				return true
			}
		}
		return false
	}
}

// matches returns a record predicate for field/value pairs, as has reads
// them.
func matches(want []string) func(Record) bool {
	return func(r Record) bool {
		for i := 0; i+1 < len(want); i += 2 {
			got, value := strings.ToLower(r[want[i]]), strings.ToLower(want[i+1])
			if contains, ok := strings.CutPrefix(value, "~"); ok {
				if !strings.Contains(got, contains) {
					return false
				}
			} else if got != value {
				return false
			}
		}
		return true
	}
}

// args builds a tool's arguments from key/value pairs.
func args(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}
