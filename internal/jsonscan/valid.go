package jsonscan

import "encoding/binary"

// Valid reports whether data is one valid JSON value, with whitespace
// around it allowed: exactly json.Valid's verdict (FuzzValid holds the two
// together), nesting limit of 10,000 included. It is faster on the
// strings a message is mostly made of: their contents are skipped eight
// bytes at a time (hasStringStop), where encoding/json's scanner calls a
// state function per byte; json.Valid went through a 1 KiB message at
// about 200 MB/s on the loaded 2-core box, a byte-at-a-time table about
// 1 GB/s, the words about 2.7 GB/s (BenchmarkValid).
func Valid(data []byte) bool {
	i, ok := value(data, skipSpace(data, 0))
	return ok && skipSpace(data, i) == len(data)
}

// maxDepth is encoding/json's limit on nesting.
const maxDepth = 10000

// stringStop marks the bytes that end a run of plain string contents: the
// closing quote, the escape, and the control characters a string may not
// hold.
var stringStop = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// value checks the value at data[i], which is not whitespace, and returns
// the index just past it. Containers are checked without recursion: open
// holds the brackets still open, so depth costs a byte each.
func value(data []byte, i int) (int, bool) {
	var open []byte
	for {
		// A value is expected at i.
		if i >= len(data) {
			return i, false
		}
		switch c := data[i]; c {
		case '{', '[':
			if len(open) == maxDepth {
				return i, false
			}
			open = append(open, c)
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == c+2 { // '}' or ']'
				open = open[:len(open)-1]
				i++
				break
			}
			if c == '{' {
				var ok bool
				if i, ok = key(data, i); !ok {
					return i, false
				}
			}
			continue
		case '"':
			var ok bool
			if i, ok = str(data, i); !ok {
				return i, false
			}
		case 't':
			if !hasLiteral(data, i, "true") {
				return i, false
			}
			i += 4
		case 'f':
			if !hasLiteral(data, i, "false") {
				return i, false
			}
			i += 5
		case 'n':
			if !hasLiteral(data, i, "null") {
				return i, false
			}
			i += 4
		default:
			var ok bool
			if i, ok = number(data, i); !ok {
				return i, false
			}
		}
		// A value ended at i: close what it ends, then go on to the next
		// member or element.
		for {
			if len(open) == 0 {
				return i, true
			}
			i = skipSpace(data, i)
			if i >= len(data) {
				return i, false
			}
			top := open[len(open)-1]
			if data[i] == top+2 {
				open = open[:len(open)-1]
				i++
				continue
			}
			if data[i] != ',' {
				return i, false
			}
			i = skipSpace(data, i+1)
			if top == '{' {
				var ok bool
				if i, ok = key(data, i); !ok {
					return i, false
				}
			}
			break
		}
	}
}

// key checks an object's key and its colon at data[i], and returns the
// index of the member's value (whitespace skipped).
func key(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return i, false
	}
	i, ok := str(data, i)
	if !ok {
		return i, false
	}
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != ':' {
		return i, false
	}
	return skipSpace(data, i+1), true
}

// str checks the string whose opening quote is data[i] and returns the
// index just past its closing quote.
func str(data []byte, i int) (int, bool) {
	i++
	for {
		// Eight bytes at a time while none of them stops the run, then
		// byte by byte through the table to the one that does.
		for i+8 <= len(data) && !hasStringStop(binary.LittleEndian.Uint64(data[i:])) {
			i += 8
		}
		for i < len(data) && !stringStop[data[i]] {
			i++
		}
		if i >= len(data) {
			return i, false
		}
		switch data[i] {
		case '"':
			return i + 1, true
		case '\\':
			if i+1 >= len(data) {
				return i, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(data) {
					return i, false
				}
				for _, h := range data[i+2 : i+6] {
					if !isHex(h) {
						return i, false
					}
				}
				i += 6
			default:
				return i, false
			}
		default: // a control character
			return i, false
		}
	}
}

// Bytes repeated over a word, for hasStringStop.
const (
	ones        = 0x0101010101010101
	highBits    = 0x8080808080808080
	quotes      = '"' * ones
	backslashes = '\\' * ones
)

// hasStringStop reports whether any of the eight bytes in w is one that
// stringStop marks: a quote, a backslash or a control character (< 0x20).
// These are the word-at-a-time tests of "Bit Twiddling Hacks" (hasless,
// haszero), whose yes-or-no answer is exact: a borrow from one byte into
// the next happens only when the lower byte matched.
func hasStringStop(w uint64) bool {
	q, b := w^quotes, w^backslashes // zero where the byte matched
	less := (w - 0x20*ones) &^ w
	quote := (q - ones) &^ q
	backslash := (b - ones) &^ b
	return (less|quote|backslash)&highBits != 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hasLiteral(data []byte, i int, lit string) bool {
	return len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit
}

// number checks the number at data[i] (RFC 8259: -?(0|[1-9][0-9]*)
// (\.[0-9]+)?([eE][+-]?[0-9]+)?) and returns the index just past it.
func number(data []byte, i int) (int, bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		return i, false
	case data[i] == '0':
		i++
	case '1' <= data[i] && data[i] <= '9':
		i = digits(data, i)
	default:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		j := digits(data, i+1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(data, i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}

func digits(data []byte, i int) int {
	for i < len(data) && '0' <= data[i] && data[i] <= '9' {
		i++
	}
	return i
}
