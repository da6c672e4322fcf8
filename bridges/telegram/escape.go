package telegram

import (
	"fmt"
	"strings"
)

// Telegram's parse modes (https://core.telegram.org/bots/api#formatting-options).
const (
	ParseModeMarkdownV2 = "MarkdownV2"
	ParseModeHTML       = "HTML"
	// ParseModeMarkdown is Telegram's legacy Markdown.
	ParseModeMarkdown = "Markdown"
)

// EscapeMarkdownV2 makes s literal text for parse_mode MarkdownV2 outside
// any entity: it puts a '\' before each of _*[]()~`>#+-=|{}.! and before
// '\' itself, which is every character Telegram reserves there. An agent
// that builds a MarkdownV2 reply around text it did not write (a user's
// message, a web page) escapes that text with it:
//
//	"*" + EscapeMarkdownV2(title) + "*"
func EscapeMarkdownV2(s string) string {
	return escapeWith(s, `_*[]()~`+"`"+`>#+-=|{}.!\`)
}

// EscapeMarkdownV2Code makes s literal inside a MarkdownV2 code or pre
// entity (between ` or ```): there only '`' and '\' are escaped.
func EscapeMarkdownV2Code(s string) string { return escapeWith(s, "`\\") }

// EscapeMarkdownV2URL makes s literal inside the (...) part of a
// MarkdownV2 inline link or custom emoji: there only ')' and '\' are
// escaped.
func EscapeMarkdownV2URL(s string) string { return escapeWith(s, `)\`) }

// EscapeMarkdown makes s literal text for the legacy parse_mode Markdown,
// outside any entity: a '\' before each of _*`[. Legacy Markdown cannot
// escape inside an entity; prefer MarkdownV2 or HTML for new replies.
func EscapeMarkdown(s string) string { return escapeWith(s, "_*`[") }

// htmlEscaper replaces what Telegram's HTML parser reserves: & < > in
// text, and the quotes that could end an attribute value. Telegram knows
// the named entities &lt; &gt; &amp; &quot; and numeric ones (&#39;).
var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")

// EscapeHTML makes s literal for parse_mode HTML, as text between tags or
// as a quoted attribute value (an <a href="...">).
func EscapeHTML(s string) string { return htmlEscaper.Replace(s) }

// Escape makes s literal for parseMode: EscapeMarkdownV2, EscapeHTML or
// EscapeMarkdown; "" (plain text) leaves s as is. Any other parse mode is
// an error naming it.
func Escape(s, parseMode string) (string, error) {
	switch parseMode {
	case "":
		return s, nil
	case ParseModeMarkdownV2:
		return EscapeMarkdownV2(s), nil
	case ParseModeHTML:
		return EscapeHTML(s), nil
	case ParseModeMarkdown:
		return EscapeMarkdown(s), nil
	}
	return "", fmt.Errorf("telegram: escape: unknown parse_mode %q (want %s, %s or %s)", parseMode, ParseModeMarkdownV2, ParseModeHTML, ParseModeMarkdown)
}

// escapeWith puts a '\' before each byte of s that is in special (all
// ASCII, so multi-byte runes pass through untouched).
func escapeWith(s, special string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(special, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
