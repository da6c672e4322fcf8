package bustest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// CheckOpenAPI checks that the answers a package's HTTP tests got, seen
// ("PATH METHOD STATUS", the method in lower case), are those doc, an
// OpenAPI 3.1 document (bus's /v1/openapi.json), lists for the paths
// mine selects: the document is the handlers'. A 405 answers a method
// the document does not list for a path it does. Each add-on checks
// its own paths, with the answers its own tests got.
func CheckOpenAPI(t testing.TB, doc []byte, seen map[string]bool, mine func(path string) bool) {
	t.Helper()
	var d struct {
		OpenAPI string                                                   `json:"openapi"`
		Paths   map[string]map[string]struct{ Responses map[string]any } `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if d.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q; want 3.1.0", d.OpenAPI)
	}
	var documented []string
	for p, ops := range d.Paths {
		if !mine(p) {
			continue
		}
		for m, op := range ops {
			for status := range op.Responses {
				documented = append(documented, fmt.Sprintf("%s %s %s", p, m, status))
			}
		}
	}
	if len(documented) == 0 {
		t.Error("openapi.json documents none of the paths checked")
	}
	var got []string
	for k := range seen {
		var p, m string
		var status int
		if _, err := fmt.Sscanf(k, "%s %s %d", &p, &m, &status); err != nil || !mine(p) {
			continue
		}
		if status == 405 {
			if _, listed := d.Paths[p][m]; listed || d.Paths[p] == nil {
				t.Errorf("405 for %s %s, a path and method the document lists (or a path it does not)", m, p)
			}
			continue
		}
		got = append(got, k)
	}
	slices.Sort(documented)
	slices.Sort(got)
	if !slices.Equal(documented, got) {
		t.Errorf("openapi.json documents\n  %s\nthe handlers answered\n  %s", strings.Join(documented, "\n  "), strings.Join(got, "\n  "))
	}
}
