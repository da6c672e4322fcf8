package spawner

import (
	"slices"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{"bin/echo-agent", []string{"bin/echo-agent"}},
		{"  python3   agent.py\t--verbose\n", []string{"python3", "agent.py", "--verbose"}},
		{`agent --name "my agent"`, []string{"agent", "--name", "my agent"}},
		{`agent --name 'my "agent"'`, []string{"agent", "--name", `my "agent"`}},
		{`agent "a \"quoted\" \\ word"`, []string{"agent", `a "quoted" \ word`}},
		{`agent "keep \n as is"`, []string{"agent", `keep \n as is`}},
		{`agent my\ agent`, []string{"agent", "my agent"}},
		{`agent a'b'"c"d`, []string{"agent", "abcd"}},
		{`agent ''`, []string{"agent", ""}},
		// No shell: these are plain characters.
		{`agent $HOME *.txt ~ | cat > out; rm -rf /`, []string{"agent", "$HOME", "*.txt", "~", "|", "cat", ">", "out;", "rm", "-rf", "/"}},
	}
	for _, tt := range tests {
		got, err := SplitCommand(tt.line)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "   ", `agent "open`, `agent 'open`, `agent trailing\`} {
		if got, err := SplitCommand(bad); err == nil {
			t.Errorf("SplitCommand(%q) = %q, want an error", bad, got)
		}
	}
}
