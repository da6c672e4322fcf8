package spawner

import (
	"fmt"
	"strings"
)

// SplitCommand splits a command line into the program and its arguments
// the way a POSIX shell splits words, and does nothing else a shell does:
// words are separated by unquoted spaces, tabs or newlines; single quotes
// keep everything up to the next single quote literally; double quotes
// keep everything but \" and \\, which stand for " and \; outside quotes a
// backslash keeps the next character literally. $, *, ~, |, > and ; are
// ordinary characters: there is no expansion, globbing, piping or
// redirection, because the command is run directly, never through a
// shell. `python3 agent.py --name "my agent"` is
// ["python3", "agent.py", "--name", "my agent"].
//
// An unterminated quote or a trailing backslash is an error, as is a line
// with no words.
func SplitCommand(line string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case c == '\\':
			if i+1 == len(line) {
				return nil, fmt.Errorf("command %q: trailing backslash", line)
			}
			i++
			word.WriteByte(line[i])
			inWord = true
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("command %q: unterminated single quote at byte %d", line, i)
			}
			word.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			start := i
			closed := false
			for i++; i < len(line); i++ {
				if line[i] == '"' {
					closed = true
					break
				}
				if line[i] == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
					i++
				}
				word.WriteByte(line[i])
			}
			if !closed {
				return nil, fmt.Errorf("command %q: unterminated double quote at byte %d", line, start)
			}
			inWord = true
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("command %q: no program named", line)
	}
	return words, nil
}
