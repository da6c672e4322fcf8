package telegram

import "strings"

// safeCuts reports, for each byte offset i of text (0..len(text)), whether
// text[:i] ends with the markup of parseMode at its top level: no '\'
// waiting for the character it escapes, no tag or &entity; half written,
// and no entity open. Those are the offsets a split may cut at so that
// every piece is valid on its own. For a parse mode it does not know,
// every offset is safe.
func safeCuts(text, parseMode string) []bool {
	switch parseMode {
	case ParseModeHTML:
		return htmlCuts(text)
	case ParseModeMarkdownV2:
		return markdownCuts(text, true)
	case ParseModeMarkdown:
		return markdownCuts(text, false)
	}
	safe := make([]bool, len(text)+1)
	for i := range safe {
		safe[i] = true
	}
	return safe
}

// htmlCuts scans Telegram's HTML: a cut is safe outside tags and entities
// and with no element open.
func htmlCuts(text string) []bool {
	safe := make([]bool, len(text)+1)
	depth := 0
	for i := 0; i < len(text); {
		safe[i] = depth == 0
		switch text[i] {
		case '<':
			end := tagEnd(text, i)
			if end < 0 { // a bare '<': Telegram refuses it anyway
				i++
				continue
			}
			tag := text[i+1 : end]
			switch {
			case strings.HasPrefix(tag, "/"):
				if depth > 0 {
					depth--
				}
			case !strings.HasSuffix(tag, "/"):
				depth++
			}
			i = end + 1
		case '&':
			if j := strings.IndexByte(text[i:], ';'); j > 0 && j < 12 {
				i += j + 1
				continue
			}
			i++
		default:
			i++
		}
	}
	safe[len(text)] = depth == 0
	return safe
}

// tagEnd is the offset of the '>' that ends the tag opening at i, quoted
// attribute values skipped, or -1.
func tagEnd(text string, i int) int {
	var quote byte
	for j := i + 1; j < len(text); j++ {
		switch c := text[j]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '>':
			return j
		case c == '<':
			return -1
		}
	}
	return -1
}

// markdownCuts scans MarkdownV2 (v2) or legacy Markdown: a cut is safe
// after a complete escape, outside code, pre and links, and with no
// style (*bold*, _italic_, __underline__, ~strike~, ||spoiler||) open.
func markdownCuts(text string, v2 bool) []bool {
	safe := make([]bool, len(text)+1)
	open := map[string]bool{}
	var inCode, inPre, inLinkText, inURL bool
	top := func() bool {
		return !inCode && !inPre && !inLinkText && !inURL && len(open) == 0
	}
	toggle := func(m string) {
		if open[m] {
			delete(open, m)
		} else {
			open[m] = true
		}
	}
	for i := 0; i < len(text); {
		safe[i] = top()
		c := text[i]
		switch {
		case c == '\\' && (v2 || !inCode && !inPre):
			// The escaped byte and the rest of its rune go with the '\'.
			i += 2
			for i < len(text) && !utfStart(text[i]) {
				i++
			}
			continue
		case inPre:
			if strings.HasPrefix(text[i:], "```") {
				inPre = false
				i += 3
				continue
			}
		case inCode:
			if c == '`' {
				inCode = false
			}
		case inURL:
			if c == ')' {
				inURL = false
			}
		case strings.HasPrefix(text[i:], "```"):
			inPre = true
			i += 3
			continue
		case c == '`':
			inCode = true
		case c == '[':
			inLinkText = true
		case c == ']' && inLinkText:
			inLinkText = false
			if i+1 < len(text) && text[i+1] == '(' {
				inURL = true
				i += 2
				continue
			}
		case v2 && strings.HasPrefix(text[i:], "__"):
			toggle("__")
			i += 2
			continue
		case v2 && strings.HasPrefix(text[i:], "||"):
			toggle("||")
			i += 2
			continue
		case c == '*' || c == '_' || v2 && c == '~':
			toggle(string(c))
		}
		i++
	}
	if len(text) < len(safe) {
		safe[len(text)] = top()
	}
	return safe
}

// utfStart reports whether b starts a UTF-8 sequence (or is ASCII).
func utfStart(b byte) bool { return b&0xC0 != 0x80 }
