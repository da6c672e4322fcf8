package bcp

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadExampleDefinitions(t *testing.T) {
	defs, err := LoadDefinitions("../examples/agents")
	if err != nil {
		t.Fatalf("LoadDefinitions: %v", err)
	}
	if len(defs) != 2 || defs[0].Name != "main" || defs[1].Name != "researcher" {
		t.Fatalf("got %d definitions", len(defs))
	}
	main, researcher := defs[0], defs[1]
	if got := strings.Join(main.Tools, "|"); got != "Read|Write|Edit|Bash|Grep|Glob|BCPQuery|SendMessage" {
		t.Errorf("tools = %s", got)
	}
	if !strings.HasPrefix(main.Instructions, "\nYou are the main orchestrator agent.") {
		t.Errorf("instructions = %.60q", main.Instructions)
	}
	c := main.Channel("researcher", Controller)
	if c == nil || c.MaxCategory != 2 || c.BudgetBits != 1000 || c.MaxCat2Queries != 10 || len(c.Subscriptions) != 2 {
		t.Fatalf("main's channel = %+v", c)
	}
	if cost := c.Subscriptions[0].Spec.Cost(); cost != 671 { // the spec's "671.0 bits"
		t.Errorf("research-findings costs %v", cost)
	}
	if cost := c.Subscriptions[1].Spec.Cost(); cost != 3 {
		t.Errorf("research-alerts costs %v", cost)
	}
	if researcher.Network != "outbound" || len(researcher.CronSchedules) != 1 || researcher.CronSchedules[0].Schedule != "0 */2 * * *" {
		t.Errorf("researcher = %+v", researcher)
	}
	if researcher.Channel("main", Reader) == nil {
		t.Error("researcher has no reader channel to main")
	}

	// The spec's example publish validates against the example subscription.
	sub := c.Subscriptions[0]
	res, err := sub.Spec.Validate([]byte(`{
		"q1": "Quantum computing breakthrough"}`), c.ValidateOptions())
	if CodeOf(err) != CodeUnexpectedField {
		t.Errorf("the q1 keys of the spec's publish example belong to its other schema; got %v %v", res, err)
	}
	res, err = sub.Spec.Validate([]byte(`{"topic":"Quantum computing breakthrough","finding":"Google achieves 100-qubit error correction milestone","relevance":"4"}`), c.ValidateOptions())
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"topic":"quantum computing breakthrough","finding":"google achieves 100-qubit error correction milestone","relevance":"4"}`; string(res.Response) != want {
		t.Errorf("response = %s", res.Response)
	}
	if res.DeclaredBits != 671 || res.MeasuredBits != 11*(3+6+1) {
		t.Errorf("bits = %v declared, %v measured", res.DeclaredBits, res.MeasuredBits)
	}
}

// definitionFile builds a definition from front matter lines.
func definitionFile(lines ...string) string {
	return "---\n" + strings.Join(lines, "\n") + "\n---\nInstructions.\n"
}

const controllerChannel = `bcp_channels:
  - peer: reader
    role: controller
    max_category: 2
    budget_bits: 500`

func TestParseDefinitionErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		code Code
		line int
		path string
	}{
		{"no front matter", "name: x\n", CodeSyntax, 1, ""},
		{"unclosed front matter", "---\nname: x\n", CodeSyntax, 1, ""},
		{"YAML syntax", definitionFile("name: x", "tools: : x"), CodeSyntax, 3, ""},
		{"unknown top key", definitionFile("name: x", "colour: red"), CodeUnknownKey, 3, "colour"},
		{"missing name", definitionFile("model: m"), CodeMissingKey, 2, "name"},
		{"bad name", definitionFile("name: Main Agent"), CodeInvalidValue, 2, "name"},
		{"duplicate key", definitionFile("name: x", "name: y"), CodeDuplicate, 3, "name"},
		{"alias", definitionFile("name: &n x", "model: *n"), CodeSyntax, 3, "model"},
		{"bad taint", definitionFile("name: x", "base_taint: extreme"), CodeInvalidValue, 3, "base_taint"},
		{"name not a string", definitionFile("name: [x]"), CodeWrongType, 2, "name"},
		{"duplicate tool", definitionFile("name: x", "tools: Read, Read"), CodeDuplicate, 3, "tools[1]"},
		{"bad cron", definitionFile("name: x", "cron_schedules:", "  - schedule: daily", "    message: go"), CodeInvalidValue, 4, "cron_schedules[0].schedule"},
		{"unknown channel key", definitionFile("name: x", controllerChannel, "    colour: red"), CodeUnknownKey, 8, "bcp_channels[0].colour"},
		{"bad role", definitionFile("name: x", strings.Replace(controllerChannel, "controller", "boss", 1)), CodeInvalidValue, 5, "bcp_channels[0].role"},
		{"max_category above 3", definitionFile("name: x", strings.Replace(controllerChannel, "max_category: 2", "max_category: 4", 1)), CodeBadCategory, 6, "bcp_channels[0].max_category"},
		{"missing budget", definitionFile("name: x", strings.Replace(controllerChannel, "    budget_bits: 500", "", 1)), CodeMissingKey, 4, "bcp_channels[0].budget_bits"},
		{"zero query limit", definitionFile("name: x", controllerChannel, "    max_cat2_queries: 0"), CodeInvalidValue, 8, "bcp_channels[0].max_cat2_queries"},
		{"bad anomaly policy", definitionFile("name: x", controllerChannel, "    anomaly_policy: ignore"), CodeInvalidValue, 8, "bcp_channels[0].anomaly_policy"},
		{"channel to itself", definitionFile("name: reader", controllerChannel), CodeInvalidValue, 4, "bcp_channels[0].peer"},
		{"duplicate channel", definitionFile("name: x", controllerChannel, strings.TrimPrefix(controllerChannel, "bcp_channels:\n")), CodeDuplicate, 8, "bcp_channels[1]"},
		{"subscriptions on a reader channel", definitionFile("name: x", strings.Replace(controllerChannel, "controller", "reader", 1),
			"    subscriptions:", "      - id: s", "        category: 1", "        fields: [{name: a, type: boolean}]"), CodeInvalidValue, 8, "bcp_channels[0].subscriptions"},
		{"bad subscription id", definitionFile("name: x", controllerChannel,
			"    subscriptions:", "      - id: Bad_ID", "        category: 1", "        fields: [{name: a, type: boolean}]"), CodeInvalidValue, 9, "bcp_channels[0].subscriptions[0].id"},
		{"duplicate subscription id", definitionFile("name: x", controllerChannel,
			"    subscriptions:", "      - id: s", "        category: 1", "        fields: [{name: a, type: boolean}]",
			"      - id: s", "        category: 1", "        fields: [{name: b, type: boolean}]"), CodeDuplicate, 12, "bcp_channels[0].subscriptions[1].id"},
		{"subscription above max_category", definitionFile("name: x", controllerChannel,
			"    subscriptions:", "      - id: s", "        category: 3", "        directive: d", "        max_words: 5"), CodeCategoryAboveMax, 10, "bcp_channels[0].subscriptions[0].category"},
		{"subscription spec error", definitionFile("name: x", controllerChannel,
			"    subscriptions:", "      - id: s", "        category: 2", "        questions:", "          - id: q1", "            question: Who?", "            max_words: 3", "            expected_format: full_name"),
			CodeUnknownFormat, 15, "bcp_channels[0].subscriptions[0].questions[0].expected_format"},
		{"Category-2 spec keys on a Category-1 subscription", definitionFile("name: x", controllerChannel,
			"    subscriptions:", "      - id: s", "        category: 1", "        questions: []"), CodeUnknownKey, 11, "bcp_channels[0].subscriptions[0].questions"},
		{"subscription without id", definitionFile("name: x", controllerChannel,
			"    subscriptions:", "      - category: 1", "        fields: [{name: a, type: boolean}]"), CodeMissingKey, 9, "bcp_channels[0].subscriptions[0].id"},
		{"zero max_pushes_per_hour", definitionFile("name: x", controllerChannel,
			"    subscriptions:", "      - id: s", "        max_pushes_per_hour: 0", "        category: 1", "        fields: [{name: a, type: boolean}]"), CodeInvalidValue, 10, "bcp_channels[0].subscriptions[0].max_pushes_per_hour"},
		{"max_pushes_per_hour not a number", definitionFile("name: x", controllerChannel,
			"    subscriptions:", "      - id: s", "        max_pushes_per_hour: often", "        category: 1", "        fields: [{name: a, type: boolean}]"), CodeWrongType, 10, "bcp_channels[0].subscriptions[0].max_pushes_per_hour"},
		{"invalid UTF-8", "---\nname: \xff\n---\n", CodeSyntax, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseDefinition("agent.md", []byte(tt.file))
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("got %v, want Errors", err)
			}
			e := errs[0]
			if e.Code != tt.code || e.Line != tt.line || e.Path != tt.path || e.File != "agent.md" {
				t.Errorf("got %s line %d at %q in %q (%v), want %s line %d at %q", e.Code, e.Line, e.Path, e.File, err, tt.code, tt.line, tt.path)
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	e := &Error{Code: CodeBadCategory, Path: "bcp_channels[0].max_category", Detail: "max_category must be 1, 2 or 3, not 4", File: "main.md", Line: 6}
	if got, want := e.Error(), "main.md:6: bcp_channels[0].max_category: max_category must be 1, 2 or 3, not 4 (bad_category)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := (&Error{Code: CodeMalformed, Detail: "bad"}).Error(), "bad (malformed)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	wrapped := errors.Join(errors.New("context"), Errors{e})
	if CodeOf(wrapped) != CodeBadCategory || CodeOf(errors.New("x")) != "" {
		t.Error("CodeOf does not see through wrapping")
	}
}

func writeDefinitions(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadDefinitionsCrossChecks(t *testing.T) {
	reader := definitionFile("name: reader", "bcp_channels:", "  - peer: ctl", "    role: reader", "    max_category: 1", "    budget_bits: 100")
	ctl := func(category int) string {
		return definitionFile("name: ctl", "bcp_channels:", "  - peer: reader", "    role: controller", "    max_category: 2", "    budget_bits: 500",
			"    subscriptions:", "      - id: s", "        category: "+string(rune('0'+category)),
			"        questions: [{id: q, question: '?', max_words: 2, expected_format: short_text}]",
			"        fields: [{name: a, type: boolean}]")
	}
	tests := []struct {
		name  string
		files map[string]string
		want  []string // "file:line: code" of each error
	}{
		{"no peer agent", map[string]string{"ctl.md": definitionFile("name: ctl", controllerChannel)},
			[]string{"ctl.md:4 no_peer_channel bcp_channels[0].peer"}},
		{"peer without the channel back", map[string]string{
			"ctl.md":    definitionFile("name: ctl", controllerChannel),
			"reader.md": definitionFile("name: reader")},
			[]string{"ctl.md:4 no_peer_channel bcp_channels[0].peer"}},
		{"reader channel without a controller", map[string]string{
			"ctl.md":    definitionFile("name: ctl"),
			"reader.md": reader},
			[]string{"reader.md:4 no_peer_channel bcp_channels[0].peer"}},
		{"duplicate agent names", map[string]string{
			"a.md": definitionFile("name: same"),
			"b.md": definitionFile("name: same")},
			[]string{"b.md:2 duplicate name"}},
		{"subscription above the reader's max_category; errors in every file", map[string]string{
			"ctl.md":    strings.Replace(ctl(1), "        questions: [{id: q, question: '?', max_words: 2, expected_format: short_text}]\n", "", 1),
			"reader.md": reader,
			"other.md":  definitionFile("name: other", "colour: red")},
			[]string{"other.md:3 unknown_key colour"}},
		{"spec keys of another category", map[string]string{"ctl.md": ctl(2), "reader.md": reader},
			[]string{"ctl.md:10 category_above_max bcp_channels[0].subscriptions[0].category", "ctl.md:12 unknown_key bcp_channels[0].subscriptions[0].fields"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadDefinitions(writeDefinitions(t, tt.files))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("got %v, want Errors", err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, filepath.Base(e.File)+":"+itoa(e.Line)+" "+string(e.Code)+" "+e.Path)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
	// A Category-1 subscription within both channels' maxima loads.
	ok := strings.Replace(ctl(1), "        questions: [{id: q, question: '?', max_words: 2, expected_format: short_text}]\n", "", 1)
	if _, err := LoadDefinitions(writeDefinitions(t, map[string]string{"ctl.md": ok, "reader.md": reader})); err != nil {
		t.Errorf("valid pair rejected: %v", err)
	}
	// A Category-2 subscription on a channel the reader caps at 1 does not.
	above := strings.Replace(ctl(2), "        fields: [{name: a, type: boolean}]\n", "", 1)
	_, err := LoadDefinitions(writeDefinitions(t, map[string]string{"ctl.md": above, "reader.md": reader}))
	if e := asFirst(t, err); e.Code != CodeCategoryAboveMax || e.Path != "bcp_channels[0].subscriptions[0].category" {
		t.Errorf("got %v", err)
	}
	if _, err := LoadDefinitions(filepath.Join(t.TempDir(), "missing")); err == nil || CodeOf(err) != "" {
		t.Errorf("a missing directory gives %v, want an I/O error", err)
	}
}

func asFirst(t *testing.T, err error) *Error {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) || len(errs) == 0 {
		t.Fatalf("got %v, want Errors", err)
	}
	return errs[0]
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestSplitFrontMatter(t *testing.T) {
	tests := []struct {
		name, in    string
		front, body string
		ok          bool
	}{
		{"plain", "---\na: 1\n---\nbody\n", "a: 1", "body\n", true},
		{"BOM and CRLF", "\ufeff---\r\na: 1\r\nb: 2\r\n---\r\nline\r\nline\r\n", "a: 1\nb: 2", "line\nline\n", true},
		{"dots close", "---\na: 1\n...\nbody", "a: 1", "body", true},
		{"trailing blanks on fences", "--- \na: 1\n---\t\nbody", "a: 1", "body", true},
		{"no body", "---\na: 1\n---", "a: 1", "", true},
		{"empty front matter", "---\n---\nbody", "", "body", true},
		{"a later --- stays in the body", "---\na: 1\n---\nx\n---\ny\n", "a: 1", "x\n---\ny\n", true},
		{"no opening fence", "a: 1\n---\n", "", "", false},
		{"opening fence not first", "\n---\na: 1\n---\n", "", "", false},
		{"not closed", "---\na: 1\n", "", "", false},
		{"empty", "", "", "", false},
		{"four dashes", "----\na: 1\n----\n", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			front, body, err := splitFrontMatter([]byte(tt.in))
			if !tt.ok {
				if err == nil || err.Code != CodeSyntax || err.Line != 1 {
					t.Errorf("got %q %q %v, want a syntax error on line 1", front, body, err)
				}
				return
			}
			if err != nil || string(front) != tt.front || body != tt.body {
				t.Errorf("got %q %q %v, want %q %q", front, body, err, tt.front, tt.body)
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	sub := func(id, field string) string {
		return "      - id: " + id + "\n        category: 1\n        fields: [{name: " + field + ", type: boolean}]"
	}
	channel := func(peer, role string) string {
		return "  - peer: " + peer + "\n    role: " + role + "\n    max_category: 2\n    budget_bits: 100"
	}
	dir := writeDefinitions(t, map[string]string{
		"a.md": definitionFile("name: alpha", "bcp_channels:", channel("reader", "controller"), "    subscriptions:", sub("news", "from_alpha")),
		"b.md": definitionFile("name: beta", "bcp_channels:", channel("reader", "controller"), "    subscriptions:", sub("news", "from_beta"), sub("more", "x")),
		"r.md": definitionFile("name: reader", "bcp_channels:", channel("alpha", "reader"), channel("beta", "reader")),
	})
	defs, err := LoadDefinitions(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(defs)
	if err != nil {
		t.Fatal(err)
	}
	// Two controllers' subscriptions with one id do not collide.
	a, errA := reg.Subscription("reader", "alpha", "news")
	b, errB := reg.Subscription("reader", "beta", "news")
	if errA != nil || errB != nil || a.Spec.Fields[0].Name != "from_alpha" || b.Spec.Fields[0].Name != "from_beta" {
		t.Fatalf("lookups: %v %v %v %v", a, errA, b, errB)
	}
	for _, key := range []SubscriptionKey{{"reader", "gamma", "news"}, {"alpha", "reader", "news"}, {"reader", "alpha", "more"}} {
		if _, err := reg.Subscription(key.Reader, key.Controller, key.ID); CodeOf(err) != CodeSubscriptionNotFound {
			t.Errorf("lookup %+v: %v", key, err)
		}
	}
	active := reg.ForReader("reader")
	out, err := json.Marshal(active)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"subscription_id":"news","controller":"alpha","category":1,"fields":[{"name":"from_alpha","type":"boolean"}]},` +
		`{"subscription_id":"news","controller":"beta","category":1,"fields":[{"name":"from_beta","type":"boolean"}]},` +
		`{"subscription_id":"more","controller":"beta","category":1,"fields":[{"name":"x","type":"boolean"}]}]`
	if string(out) != want {
		t.Errorf("bcp_subscriptions_active entries:\n%s\nwant\n%s", out, want)
	}
	if len(reg.ForReader("alpha")) != 0 || reg.Definition("beta") == nil || reg.Definition("nobody") != nil {
		t.Error("registry lookups by agent are wrong")
	}
	// NewRegistry refuses unchecked definitions.
	if _, err := NewRegistry([]*Definition{{Name: "x", Channels: []Channel{{Peer: "y", Role: Controller, MaxCategory: 1, BudgetBits: 1}}}}); CodeOf(err) != CodeNoPeerChannel {
		t.Errorf("NewRegistry accepted a dangling channel: %v", err)
	}
}

func TestCheckDefinitionsNil(t *testing.T) {
	if err := CheckDefinitions([]*Definition{nil}); CodeOf(err) != CodeInvalidValue {
		t.Errorf("got %v", err)
	}
	if _, err := NewRegistry([]*Definition{nil}); err == nil {
		t.Error("NewRegistry accepted a nil definition")
	}
	out, err := json.Marshal(ActiveSubscription{Controller: "c", Subscription: Subscription{ID: "s"}})
	if err != nil || string(out) != `{"subscription_id":"s","controller":"c"}` {
		t.Errorf("got %s %v", out, err)
	}
}
