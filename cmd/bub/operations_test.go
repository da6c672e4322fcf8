package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// operationsDoc is the operator's handbook, whose configuration reference
// lists every flag of bub serve between these markers.
const (
	operationsDoc   = "../../docs/OPERATIONS.md"
	flagTableBegin  = "<!-- serve-flags:begin (generated: cmd/bub/operations_test.go) -->"
	flagTableEnd    = "<!-- serve-flags:end -->"
	updateOperation = "BUB_UPDATE_OPERATIONS"
)

// serveFlagTable renders the reference table from serve's own flag set:
// the flag, its variable, its key in the --config file, its default and
// its help text, so the handbook says exactly what --help says.
func serveFlagTable() string {
	_, fs := newServeFlags(stdio{err: io.Discard})
	var b strings.Builder
	b.WriteString("| flag | variable | config key | default | what it sets |\n|---|---|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		key := strings.ReplaceAll(f.Name, "-", "_")
		switch {
		case notFileKeys[f.Name]:
			key = "(flag and variable only)"
		case limitFlags[f.Name]:
			key = "`limits." + key + "`"
		default:
			key = "`" + key + "`"
		}
		def := ""
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s | %s |\n", f.Name, envOf(f), key, def, strings.ReplaceAll(f.Usage, "|", `\|`))
	})
	return b.String()
}

// TestOperationsFlagTable keeps docs/OPERATIONS.md's configuration
// reference in step with bub serve: a flag added, renamed or redescribed
// fails here until the table says the same. BUB_UPDATE_OPERATIONS=1
// rewrites the table in place.
func TestOperationsFlagTable(t *testing.T) {
	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	begin, end := strings.Index(text, flagTableBegin), strings.Index(text, flagTableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s: no %q ... %q markers around the serve flag table", operationsDoc, flagTableBegin, flagTableEnd)
	}
	got := strings.TrimSpace(text[begin+len(flagTableBegin) : end])
	want := strings.TrimSpace(serveFlagTable())
	if got == want {
		return
	}
	if os.Getenv(updateOperation) == "1" {
		text = text[:begin+len(flagTableBegin)] + "\n" + want + "\n" + text[end:]
		if err := os.WriteFile(operationsDoc, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the serve flag table in %s", operationsDoc)
		return
	}
	gotRows, wantRows := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(gotRows), len(wantRows)); i++ {
		var g, w string
		if i < len(gotRows) {
			g = gotRows[i]
		}
		if i < len(wantRows) {
			w = wantRows[i]
		}
		if g != w {
			t.Errorf("%s: the serve flag table differs from bub serve's flags at row %d:\n doc:  %s\n flag: %s", operationsDoc, i+1, g, w)
			break
		}
	}
	t.Errorf("run `%s=1 go test ./cmd/bub -run TestOperationsFlagTable` to rewrite the table from the flags", updateOperation)
}
