package jsonscan

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzValid holds Valid to json.Valid.
func FuzzValid(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `[1,2]`, ` {"a" : [ null , true , false ] } `, `{"a":"\u00e9\ud800\/\b\f\n\r\t\"\\"}`,
		"\"\xff\xfe\"", `1e400`, `-0.0e-0`, `-0`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `1E-7`, `[1,]`, `{"a":1,}`,
		`{"a"}`, `{"a":}`, `{1:2}`, `"\u12"`, `"\u12G4"`, `"\q"`, "\"\x01\"", "\"\t\"", `nul`, `nulll`, `true false`,
		`tru`, "\u2028", `{"a":1}{"b":2}`, `[[[]]]`, `[[[]]`, `]`, `}`, `{"a":{"b":[{"c":"d"}]}}`, `""`, `"`, `"\`, `"\"`,
		`{"type":"task_request","text":"lorem ipsum lorem ipsum"}`, `[1 2]`, `{"a":1 "b":2}`, "\x00", ` `, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

// TestValidDepth: nesting is allowed as deep as encoding/json allows it,
// and no deeper.
func TestValidDepth(t *testing.T) {
	for _, n := range []int{1, 100, 9999, 10000, 10001, 20000} {
		for _, doc := range []string{
			strings.Repeat("[", n) + strings.Repeat("]", n),
			strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n),
			strings.Repeat(`[{"a":`, n/2) + "1" + strings.Repeat("}]", n/2),
			strings.Repeat("[", n),
		} {
			if got, want := Valid([]byte(doc)), json.Valid([]byte(doc)); got != want {
				t.Errorf("%.12s… (depth %d, %d bytes): Valid %v, json.Valid %v", doc, n, len(doc), got, want)
			}
		}
	}
}

// benchMessage is a delivery of a 1 KiB payload, as the relay benchmarks
// send.
var benchMessage = []byte(`{"id":7,"jsonrpc":"2.0","method":"processMessage","params":{"topic":"bench:t1","subscription":"bench:*","payload":{"type":"task_request","text":"` + strings.Repeat("lorem ipsum ", 80) + `"},"messageId":"abc-1","from":"p","attempt":1}}`)

// BenchmarkValid checks a message with Valid; BenchmarkJSONValid with
// json.Valid, which it replaced.
func BenchmarkValid(b *testing.B) {
	b.SetBytes(int64(len(benchMessage)))
	for b.Loop() {
		if !Valid(benchMessage) {
			b.Fatal("not valid")
		}
	}
}

func BenchmarkJSONValid(b *testing.B) {
	b.SetBytes(int64(len(benchMessage)))
	for b.Loop() {
		if !json.Valid(benchMessage) {
			b.Fatal("not valid")
		}
	}
}

// hasStringStop agrees with the stringStop table on every byte at every
// place in a word, among bytes of values next to those it looks for and
// with the high bit set.
func TestHasStringStop(t *testing.T) {
	for b := range 256 {
		for at := range 8 {
			for _, fill := range []byte{'a', 0xff, 0x80, 0x21, '"' + 1, '\\' + 1} {
				var word [8]byte
				for i := range word {
					word[i] = fill
				}
				word[at] = byte(b)
				want := stringStop[b] || stringStop[fill]
				if got := hasStringStop(binary.LittleEndian.Uint64(word[:])); got != want {
					t.Fatalf("hasStringStop(% x) = %v, want %v", word, got, want)
				}
			}
		}
	}
}
