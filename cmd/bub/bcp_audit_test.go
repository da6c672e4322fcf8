package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bcp/gateway"
)

// bub bcp audit keeps the records of --channel newer than --since, and
// refuses malformed filters with a usage error.
func TestBCPAuditFilters(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	var lines []string
	for i, r := range []gateway.AuditRecord{
		{Time: now.Add(-2 * time.Hour), Event: "query", Controller: "main", Reader: "researcher", Outcome: "ok"},
		{Time: now.Add(-time.Minute), Event: "query", Controller: "main", Reader: "researcher", Outcome: "budget_exhausted"},
		{Time: now.Add(-time.Minute), Event: "query", Controller: "main", Reader: "scraper", Outcome: "ok"},
	} {
		r.Seq = uint64(i + 1)
		line, _ := json.Marshal(r)
		lines = append(lines, string(line))
	}
	if err := os.WriteFile(filepath.Join(dir, gateway.AuditFileName), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	seqs := func(args ...string) []uint64 {
		t.Helper()
		code, out, stderr := runCLI(context.Background(), "", append([]string{"bcp", "audit", "--data-dir", dir, "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("bcp audit %v: exit %d, %s", args, code, stderr)
		}
		var got []uint64
		for _, line := range strings.Fields(out) {
			var r gateway.AuditRecord
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			got = append(got, r.Seq)
		}
		return got
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "[1 2 3]"},
		{[]string{"--since", "1h"}, "[2 3]"},
		{[]string{"--channel", "main/researcher"}, "[1 2]"},
		{[]string{"--channel", "main/researcher", "--since", "1h"}, "[2]"},
		{[]string{"--channel", "main/nobody"}, "[]"},
	} {
		if got := seqs(c.args...); fmt.Sprint(got) != c.want {
			t.Errorf("bcp audit %v: records %v, want %s", c.args, got, c.want)
		}
	}
	for _, bad := range [][]string{{"--channel", "main"}, {"--since", "-1h"}} {
		if code, _, stderr := runCLI(context.Background(), "", append([]string{"bcp", "audit", "--data-dir", dir}, bad...)...); code != 2 || !strings.Contains(stderr, bad[0]) {
			t.Errorf("bcp audit %v: exit %d, %s; want a usage error naming %s", bad, code, stderr, bad[0])
		}
	}
}
