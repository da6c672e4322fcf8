package eval

import (
	"maps"
	"slices"
)

// Record is one row of an environment's table: field → value.
type Record map[string]string

// Env is a suite's environment: its whole state as data, tables of
// records. Tools change it; success predicates read it after the run.
type Env struct {
	Tables map[string][]Record `json:"tables"`
}

// NewEnv returns an environment holding tables, copied.
func NewEnv(tables map[string][]Record) *Env {
	e := &Env{Tables: map[string][]Record{}}
	for name, rows := range tables {
		for _, r := range rows {
			e.Add(name, r)
		}
	}
	return e
}

// Add appends a copy of r to table.
func (e *Env) Add(table string, r Record) { e.Tables[table] = append(e.Tables[table], maps.Clone(r)) }

// Rows returns table's records whose field equals value ("" field: all).
func (e *Env) Rows(table, field, value string) []Record {
	var out []Record
	for _, r := range e.Tables[table] {
		if field == "" || r[field] == value {
			out = append(out, r)
		}
	}
	return out
}

// Any reports whether some record of table satisfies pred.
func (e *Env) Any(table string, pred func(Record) bool) bool {
	return slices.ContainsFunc(e.Tables[table], pred)
}

// Set sets field to value in every record of table whose key equals
// keyValue, and reports how many it changed.
func (e *Env) Set(table, key, keyValue, field, value string) int {
	n := 0
	for _, r := range e.Tables[table] {
		if r[key] == keyValue {
			r[field] = value
			n++
		}
	}
	return n
}

// Delete removes the records of table whose key equals keyValue.
func (e *Env) Delete(table, key, keyValue string) {
	e.Tables[table] = slices.DeleteFunc(e.Tables[table], func(r Record) bool { return r[key] == keyValue })
}
