package bus_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCoreImportsNoAddOn: the core knows none of its add-ons
// (docs/ARCHITECTURE.md). No non-test file of package bus imports a
// package under bus/ but bus/store, so an add-on's code cannot creep
// back into the core through an import.
func TestCoreImportsNoAddOn(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "github.com/bub-bus/bub/bus/"
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, prefix) && path != prefix+"store" {
				t.Errorf("%s imports %s: the core imports no add-on; give it a seam (extend.go) instead", name, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no file of package bus read")
	}
}
