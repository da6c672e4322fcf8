package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runBub(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), stdio{in: strings.NewReader(stdin), out: &out, err: &errOut}, args)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBCPUsage: help prints the usage; a usage error says in one line
// what was missing or wrong.
func TestBCPUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bcp"}, 2, "Usage: bub bcp"},
		{[]string{"bcp", "help"}, 0, "Usage: bub bcp"},
		{[]string{"bcp", "frobnicate"}, 2, "Usage: bub bcp"},
		{[]string{"bcp", "check"}, 2, "bub bcp check: name one directory"},
		{[]string{"bcp", "check", "a", "b"}, 2, "bub bcp check: name one directory"},
		{[]string{"bcp", "check", "--help"}, 0, "Usage: bub bcp check"},
		{[]string{"bcp", "validate"}, 2, "no --query and no --response"},
		{[]string{"bcp", "validate", "--query", "q.json"}, 2, "bub bcp validate: no --response: pass"},
		{[]string{"bcp", "validate", "--response", "r.json"}, 2, "bub bcp validate: no --query: pass"},
		{[]string{"bcp", "validate", "--query", "-", "--response", "-"}, 2, "cannot both read stdin"},
		{[]string{"bcp", "validate", "--query", "q", "--response", "r", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"bcp", "validate", "--bogus"}, 2, "unknown flag --bogus"},
		{[]string{"bcp", "validate", "--help"}, 0, "Usage: bub bcp validate"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runBub(t, "", tt.args...)
		if code != tt.code {
			t.Errorf("bub %s: exit %d, want %d", strings.Join(tt.args, " "), code, tt.code)
		}
		if code == 0 {
			stderr = stdout // help that was asked for is output
		}
		if !strings.Contains(stderr, tt.want) {
			t.Errorf("bub %s: stderr %q does not say %q", strings.Join(tt.args, " "), stderr, tt.want)
		}
		if !strings.Contains(tt.want, "Usage") && strings.Count(stderr, "\n") != 1 {
			t.Errorf("bub %s: want one line, got %q", strings.Join(tt.args, " "), stderr)
		}
	}
}

// TestBCPCheckPaths: a directory without definitions is an error naming
// it, not "0 agents" and success; a file is checked on its own.
func TestBCPCheckPaths(t *testing.T) {
	empty := t.TempDir()
	writeFile(t, empty, "notes.txt", "not a definition")
	code, stdout, stderr := runBub(t, "", "bcp", "check", empty)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "bub bcp check: "+empty+": no agent definitions") {
		t.Errorf("empty directory: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	file := "../../examples/agents/main.md"
	code, stdout, stderr = runBub(t, "", "bcp", "check", file)
	if code != 0 || !strings.HasPrefix(stdout, file+": 1 agent,") || !strings.Contains(stdout, "checked on its own") {
		t.Errorf("one file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	bad := writeFile(t, t.TempDir(), "bad.md", "---\nname: a\ncolour: red\n---\n")
	code, _, stderr = runBub(t, "", "bcp", "check", bad)
	if code != 1 || !strings.Contains(stderr, bad+":3: colour") {
		t.Errorf("a broken file: exit %d, stderr %q", code, stderr)
	}
}

func TestBCPCheckExamples(t *testing.T) {
	code, stdout, stderr := runBub(t, "", "bcp", "check", "../../examples/agents")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"2 agents, 2 channels, 2 subscriptions",
		"controller of researcher: max category 2, budget 1000.0 bits, 10 cat-2 queries",
		"subscription research-findings: category 2, 671.0 bits",
		"subscription research-alerts: category 1, 3.0 bits",
		"reader of main",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
}

func TestBCPCheckReportsEveryError(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.md", "---\nname: a\ncolour: red\n---\n")
	writeFile(t, dir, "b.md", "---\nname: b\nbcp_channels:\n  - peer: nobody\n    role: controller\n    max_category: 1\n    budget_bits: 10\n---\n")
	writeFile(t, dir, "notes.txt", "not a definition")
	code, stdout, stderr := runBub(t, "", "bcp", "check", dir)
	if code != 1 || stdout != "" {
		t.Fatalf("exit %d, stdout %q", code, stdout)
	}
	for _, want := range []string{
		filepath.Join(dir, "a.md") + ":3: colour: unknown key \"colour\" (unknown_key)",
		filepath.Join(dir, "b.md") + ":4: bcp_channels[0].peer: no agent named \"nobody\" (no_peer_channel)",
		"bub bcp check: " + dir + ": 2 problems in the agent definitions",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code, _, stderr := runBub(t, "", "bcp", "check", filepath.Join(dir, "missing")); code != 1 || !strings.Contains(stderr, filepath.Join(dir, "missing")+": no such file") {
		t.Errorf("missing directory: exit %d, %q", code, stderr)
	}
}

const cliQuery = `{"category":2,"questions":[
	{"id":"who","question":"Who wrote it?","max_words":3,"expected_format":"person_name"},
	{"id":"topic","question":"What about?","max_words":6,"expected_format":"short_text"}]}`

func TestBCPValidate(t *testing.T) {
	dir := t.TempDir()
	query := writeFile(t, dir, "q.json", cliQuery)
	badQuery := writeFile(t, dir, "bad.json", `{"category":2,"questions":[{"id":"q","question":"?","max_words":3,"expected_format":"name"}]}`)
	tests := []struct {
		name     string
		query    string
		response string
		flags    []string
		code     int
		check    func(t *testing.T, out map[string]any)
	}{
		{"accepted and normalized", query, `{"topic":"Solar  PANELS","who":"Jane Smith"}`, nil, 0, func(t *testing.T, out map[string]any) {
			if r := out["response"].(map[string]any); r["who"] != "jane smith" || r["topic"] != "solar panels" {
				t.Errorf("response = %v", r)
			}
			if out["declared_bits"] != 99.0 || out["measured_bits"] != 44.0 {
				t.Errorf("got %v", out)
			}
			if a, _ := out["anomalies"].([]any); a == nil || len(a) != 0 {
				t.Errorf("anomalies = %v, want []", out["anomalies"])
			}
		}},
		{"anomaly flagged", query, `{"who":"Jane","topic":"visit evil.com please"}`, nil, 0, func(t *testing.T, out map[string]any) {
			if a, _ := out["anomalies"].([]any); len(a) != 2 {
				t.Errorf("anomalies = %v", out["anomalies"])
			}
		}},
		{"anomaly rejected", query, `{"who":"Jane","topic":"visit evil.com please"}`, []string{"--reject-anomalies"}, 1, func(t *testing.T, out map[string]any) {
			if e := out["error"].(map[string]any); e["code"] != "anomaly" || e["path"] != "topic" || out["in"] != "response" {
				t.Errorf("got %v", out)
			}
		}},
		{"response rejected", query, `{"who":"Jane","topic":"a b c d e f g"}`, nil, 1, func(t *testing.T, out map[string]any) {
			if e := out["error"].(map[string]any); e["code"] != "too_many_words" || e["path"] != "topic" || out["ok"] != false {
				t.Errorf("got %v", out)
			}
		}},
		{"query rejected", badQuery, `{}`, nil, 1, func(t *testing.T, out map[string]any) {
			if e := out["error"].(map[string]any); e["code"] != "unknown_format" || e["path"] != "questions[0].expected_format" || out["in"] != "query" {
				t.Errorf("got %v", out)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			response := writeFile(t, dir, "r.json", tt.response)
			args := append([]string{"bcp", "validate", "--query", tt.query, "--response", response}, tt.flags...)
			code, stdout, stderr := runBub(t, "", args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stdout %s stderr %s", code, tt.code, stdout, stderr)
			}
			var out map[string]any
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
			}
			tt.check(t, out)
			if tt.code == 0 {
				var raw struct{ Response json.RawMessage }
				var compact bytes.Buffer
				if json.Unmarshal([]byte(stdout), &raw) != nil || json.Compact(&compact, raw.Response) != nil {
					t.Fatalf("no response in %s", stdout)
				}
				if !strings.HasPrefix(compact.String(), `{"who":"jane`) {
					t.Errorf("response %s is not in the spec's order", compact.String())
				}
			}
		})
	}
	t.Run("response from stdin", func(t *testing.T) {
		code, stdout, _ := runBub(t, `{"who":"Jane","topic":"x"}`, "bcp", "validate", "--query", query, "--response", "-")
		if code != 0 || !strings.Contains(stdout, `"who": "jane"`) {
			t.Errorf("exit %d: %s", code, stdout)
		}
	})
	t.Run("unreadable file", func(t *testing.T) {
		code, _, stderr := runBub(t, "", "bcp", "validate", "--query", filepath.Join(dir, "none.json"), "--response", query)
		if code != 1 || !strings.HasPrefix(stderr, "bub bcp validate: read query: ") {
			t.Errorf("exit %d: %s", code, stderr)
		}
	})
}
