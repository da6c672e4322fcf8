package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestA2AConfigErrors: a bad --a2a-config file is refused with the
// file, and the line or the agent and field at fault.
func TestA2AConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, file, want string }{
		{"empty", ``, "a2a.yaml: empty; it needs agents:"},
		{"unknown field", "agents:\n  - name: w\n    topik: x\n", "a2a.yaml: yaml: unmarshal errors:\n  line 3: field topik not found"},
		{"no agents", "retention: 1h\n", "no agents configured"},
		{"bad name", "agents:\n  - {name: 'a/b', topic: 'agent:w', client_id: gw}\n", `agents[0]: name "a/b"`},
		{"no client", "agents:\n  - {name: w, topic: 'agent:w'}\n", `agent "w": no client_id`},
		{"bad topic", "agents:\n  - {name: w, topic: 'agent:*', client_id: gw}\n", `agent "w": topic "agent:*"`},
		{"twice", "agents:\n  - {name: w, topic: 'agent:w', client_id: gw}\n  - {name: w, topic: 'agent:v', client_id: gw}\n", `name "w" given twice`},
		{"missing token file", "agents:\n  - {name: w, topic: 'agent:w', client_id: gw, token_file: nope}\n", `agent "w": token_file: open`},
		{"bad duration", "retention: soon\nagents:\n  - {name: w, topic: 'agent:w', client_id: gw}\n", "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := parseA2AConfig(filepath.Join(dir, "a2a.yaml"), []byte(tc.file), dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
	dir := t.TempDir()
	o, err := parseA2AConfig(filepath.Join(dir, "a2a.yaml"), []byte("retention: 2h\nagents:\n  - {name: w, topic: 'agent:w', client_id: gw, skills: [{id: s, name: S}]}\n"), filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Retention.Hours() != 2 || o.Path != filepath.Join(dir, "data", "a2a.db") || o.Agents[0].Skills[0].ID != "s" {
		t.Fatalf("options: %+v", o)
	}
}

// FuzzA2AConfig: any file is options that validate, or an error naming
// the file; never a panic.
func FuzzA2AConfig(f *testing.F) {
	f.Add([]byte("agents:\n  - {name: w, topic: 'agent:w', client_id: gw}\n"))
	f.Add([]byte("retention: 1h\npublic_url: https://x\nagents: [{name: a, topic: 'tg:1', client_id: c, skills: [{id: i, name: n, tags: [t]}]}]\n"))
	f.Add([]byte("agents: 3"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "a2a.yaml")
		o, err := parseA2AConfig(path, data, dir)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("accepted options that do not validate: %v", err)
		}
	})
}
