package bcp

import (
	"bytes"
	"strings"
)

// splitFrontMatter separates a Markdown file into its YAML front matter and
// body. The file must start with a line "---" (after an optional UTF-8 BOM)
// and the front matter ends at the next line that is "---" or "...".
// Trailing spaces and CRLF line ends are tolerated; both parts come back
// with LF line ends. The front matter starts on line 2 of the file.
func splitFrontMatter(data []byte) (front []byte, body string, err *Error) {
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	first, rest, found := bytes.Cut(data, []byte("\n"))
	if !isFence(first, "---") {
		e := newError(CodeSyntax, "", `no front matter: the file must start with a line "---"`)
		e.Line = 1
		return nil, "", e
	}
	if !found {
		rest = nil
	}
	var lines [][]byte
	for len(rest) > 0 {
		var line []byte
		line, rest, found = bytes.Cut(rest, []byte("\n"))
		if isFence(line, "---") || isFence(line, "...") {
			if !found {
				rest = nil
			}
			body := strings.ReplaceAll(string(rest), "\r\n", "\n")
			return bytes.Join(lines, []byte("\n")), body, nil
		}
		lines = append(lines, bytes.TrimSuffix(line, []byte("\r")))
	}
	e := newError(CodeSyntax, "", `front matter is not closed by a line "---"`)
	e.Line = 1
	return nil, "", e
}

// isFence reports whether line is fence, ignoring a CR and trailing blanks.
func isFence(line []byte, fence string) bool {
	return string(bytes.TrimRight(line, " \t\r")) == fence
}
