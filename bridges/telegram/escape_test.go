package telegram

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		mode, in, want string
	}{
		{"", "a_b *c*", "a_b *c*"},
		{ParseModeMarkdownV2, "snake_case *x* [a](b) ~s~ `c` >q #h +1 -1 =x |y| {z}. hi!", `snake\_case \*x\* \[a\]\(b\) \~s\~ \` + "`c\\`" + ` \>q \#h \+1 \-1 \=x \|y\| \{z\}\. hi\!`},
		{ParseModeMarkdownV2, `C:\dir`, `C:\\dir`},
		{ParseModeMarkdownV2, "héllo 😀.", `héllo 😀\.`},
		{ParseModeHTML, `a < b && c > "d" 'e'`, `a &lt; b &amp;&amp; c &gt; &quot;d&quot; &#39;e&#39;`},
		{ParseModeHTML, "<b>not bold</b>", "&lt;b&gt;not bold&lt;/b&gt;"},
		{ParseModeMarkdown, "a_b*c`d[e] f.", "a\\_b\\*c\\`d\\[e] f."},
	} {
		got, err := Escape(tc.in, tc.mode)
		if err != nil || got != tc.want {
			t.Errorf("Escape(%q, %q) = %q, %v; want %q", tc.in, tc.mode, got, err, tc.want)
		}
	}
	if got := EscapeMarkdownV2Code("a`b\\c*d"); got != "a\\`b\\\\c*d" {
		t.Errorf("EscapeMarkdownV2Code = %q", got)
	}
	if got := EscapeMarkdownV2URL("https://x/(a)\\"); got != `https://x/(a\)\\` {
		t.Errorf("EscapeMarkdownV2URL = %q", got)
	}
	if _, err := Escape("x", "markdownv3"); err == nil || !strings.Contains(err.Error(), `"markdownv3"`) {
		t.Errorf("Escape with an unknown parse mode: err = %v, want one naming it", err)
	}
}

func TestSplitMarkup(t *testing.T) {
	for _, tc := range []struct {
		mode, text string
		limit      int
		want       []string
	}{
		// A cut never leaves '\' at a piece's end.
		{ParseModeMarkdownV2, `aaaa\.bbbb`, 5, []string{`aaaa`, `\.bbb`, `b`}},
		// Nor splits a bold span when a space outside it fits.
		{ParseModeMarkdownV2, "x *bold text* y", 12, []string{"x", "*bold text*", "y"}},
		{ParseModeMarkdownV2, "a `co de` b", 8, []string{"a", "`co de`", "b"}},
		{ParseModeMarkdownV2, "[a b](http://x) c", 15, []string{"[a b](http://x)", "c"}},
		// HTML: not inside an entity, a tag, or an open element.
		{ParseModeHTML, "aaa &amp; bbb", 6, []string{"aaa", "&amp;", "bbb"}},
		{ParseModeHTML, "x <b>bold text</b> y", 18, []string{"x <b>bold text</b>", "y"}},
		{ParseModeHTML, "x <b>bold text</b> y", 17, []string{"x", "<b>bold text</b>", "y"}},
		{ParseModeHTML, `<a href="http://x y">l</a> z`, 26, []string{`<a href="http://x y">l</a>`, "z"}},
		// One entity longer than the limit: cut as plain text would be.
		{ParseModeHTML, "<b>aaaa bbbb</b>", 8, []string{"<b>aaaa", "bbbb</b>"}},
		// Plain text and unknown modes split as before.
		{"", "aa\\ bb", 3, []string{"aa\\", "bb"}},
	} {
		if got := splitMarkup(tc.text, tc.mode, tc.limit); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("splitMarkup(%q, %q, %d) = %q, want %q", tc.text, tc.mode, tc.limit, got, tc.want)
		}
	}
}

// plainMarkdownV2 is a reference of Telegram's MarkdownV2 rules for text
// with no entities: every reserved character must be escaped, any ASCII
// may be, and the result is the text with the escapes removed.
func plainMarkdownV2(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' {
			if i+1 >= len(s) || s[i+1] > 126 {
				return "", errors.New("'\\' at the end or before a non-ASCII byte")
			}
			i++
			b.WriteByte(s[i])
			continue
		}
		if strings.IndexByte(`_*[]()~`+"`"+`>#+-=|{}.!`, c) >= 0 {
			return "", errors.New("reserved character " + string(c) + " not escaped")
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// plainHTML is a reference of Telegram's HTML rules for text with no
// tags: '<' and '>' never bare, '&' only in one of the entities it knows.
func plainHTML(s string) (string, error) {
	ents := map[string]string{"&lt;": "<", "&gt;": ">", "&amp;": "&", "&quot;": `"`, "&#39;": "'"}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '<', '>':
			return "", errors.New("bare " + string(c))
		case '&':
			j := strings.IndexByte(s[i:], ';')
			if j < 0 || ents[s[i:i+j+1]] == "" {
				return "", errors.New("unknown entity")
			}
			b.WriteString(ents[s[i:i+j+1]])
			i += j
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// maxFuzzEscapeLen bounds FuzzEscape's input: at least seven pieces at the
// largest limit it tries, dozens at the smallest.
const maxFuzzEscapeLen = 512

// FuzzEscape: escaped text parses back to the input under the reference
// rules, and each piece of a split of it is valid on its own.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a_b*c", `\`, "<b>&amp;</b>", "😀.!", "x\n\ny z", strings.Repeat("_. ", 40)} {
		f.Add(s, uint8(10))
	}
	f.Fuzz(func(t *testing.T, s string, limit uint8) {
		// Long inputs teach nothing that short ones, cut into pieces of
		// at most 71, do not; but splitMarkup's time grows with the
		// square of the length, and the fuzzer minimizes each new
		// interesting input by running it thousands of times: one of
		// 10 KB held a worker for the whole -fuzzminimizetime (60 s).
		if !utf8.ValidString(s) || len(s) > maxFuzzEscapeLen {
			t.Skip()
		}
		lim := int(limit)%64 + 8 // room for the longest escape, &quot;
		for mode, plain := range map[string]func(string) (string, error){ParseModeMarkdownV2: plainMarkdownV2, ParseModeHTML: plainHTML} {
			esc, err := Escape(s, mode)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := plain(esc); err != nil || got != s {
				t.Fatalf("%s: %q escaped to %q parses back to %q, %v", mode, s, esc, got, err)
			}
			for _, piece := range splitMarkup(esc, mode, lim) {
				if utf16Len(piece) > lim {
					t.Fatalf("%s: piece %q longer than %d", mode, piece, lim)
				}
				if _, err := plain(piece); err != nil {
					t.Fatalf("%s: piece %q of %q is invalid: %v", mode, piece, esc, err)
				}
			}
		}
	})
}
