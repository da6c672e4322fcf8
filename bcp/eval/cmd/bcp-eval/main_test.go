package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunWritesTableAndReport runs the smallest slice and checks the
// table on stdout and the JSON at the path BCP_EVAL_OUT names.
func TestRunWritesTableAndReport(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report.json")
	t.Setenv("BCP_EVAL_OUT", out)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-user-tasks", "1", "-injection-tasks", "1"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "baseline ASR") || !strings.Contains(stdout.String(), "checks:") {
		t.Errorf("no table on stdout:\n%s", stdout.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report: %v", err)
	}
	for _, key := range []string{"suites", "total", "checks", "runs", "user_tasks_impossible_under_bcp"} {
		if _, ok := rep[key]; !ok {
			t.Errorf("report lacks %q", key)
		}
	}
}

// TestRunRefusesBadCounts exits 2, naming the flags, for a count that is
// not one.
func TestRunRefusesBadCounts(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-user-tasks", "many"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "-user-tasks") {
		t.Errorf("exit %d, stderr %q; want 2 naming -user-tasks", code, stderr.String())
	}
}
