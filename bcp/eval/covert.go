package eval

import (
	"bytes"
	"encoding/json"
	"hash/fnv"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/bub-bus/bub/bcp"
)

// The channels the covert Reader writes to and the decoder reads from.
// The first five are open, by design or as docs/BCP.md section 12
// bounds them; the last five are the hidden channels normalization is
// meant to close, and must carry nothing.
const (
	ChannelAnswer     = "answer"        // the validated values: charged to the budget
	ChannelAnomaly    = "anomaly_flag"  // whether an answer held invisible characters: 1 bit per text answer
	ChannelRefusal    = "refusal"       // delivered or validation_failed: at most log2(3) per query
	ChannelTiming     = "timing"        // when the outcome arrives: log2(TTL/resolution) per query
	ChannelOrder      = "arrival_order" // which of concurrent queries is answered first: log2(n!) per batch
	ChannelCase       = "case"
	ChannelWhitespace = "whitespace"
	ChannelKeyOrder   = "key_order"
	ChannelUnicode    = "unicode_form"
	ChannelInvisible  = "invisible_codepoint"
)

// closedChannels are the channels normalization closes.
var closedChannels = map[string]bool{ChannelCase: true, ChannelWhitespace: true, ChannelKeyOrder: true, ChannelUnicode: true, ChannelInvisible: true}

// timingSlot is the covert Reader's delay for a 1 on the timing channel.
// The decoder reads a latency of half of it or more as a 1. The bus's
// own latency on loopback is milliseconds, but a Category-3 query waits
// for two approvals, each a few round trips and state-file syncs, and on
// a loaded machine (load 10 on 2 cores) one took over 400 ms: the slot
// is wide enough that the quantised reading is the same on every run,
// and no wall-clock value reaches the report.
const timingSlot = 2500 * time.Millisecond

// slot is a run of bits one query carries on one channel.
type slot struct {
	channel string
	field   string // the field or question; "" for the query as a whole
	word    int    // the word of a text answer
	bits    int
}

// codebook are 256 pronounceable three-letter words, one per byte: a
// word an answer may hold that trips no anomaly pattern.
var codebook = func() []string {
	const consonants, vowels, finals = "bdfghklmnprstvwz", "aeiu", "kmnt"
	var out []string
	for _, c := range consonants {
		for _, v := range vowels {
			for _, f := range finals {
				out = append(out, string([]rune{c, v, f}))
			}
		}
	}
	return out
}()

// codeIndex inverts codebook.
var codeIndex = func() map[string]int {
	m := map[string]int{}
	for i, w := range codebook {
		m[w] = i
	}
	return m
}()

const (
	maxCodeWords = 8 // bytes per text answer
	// A date answer is one word, charged 11 bits, but names one of the
	// 3.65 million days of years 0001 to 9999: 21 bits fit.
	dateBits = 21 // days after 0001-01-01
	// An integer answer is one word of up to max_chars (10) digits:
	// 32 bits fit in 4294967295.
	integerBits = 32
)

var epoch = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)

// layoutOf is where query k's bits go; reader and decoder compute it
// alike from the spec, its place, and the size of the plan's first batch.
func layoutOf(spec *bcp.Spec, k, firstBatch int) []slot {
	var out []slot
	if k == 0 {
		out = append(out, slot{channel: ChannelTiming, bits: 1})
		if firstBatch >= 2 {
			out = append(out, slot{channel: ChannelOrder, bits: 1})
		}
	} else {
		out = append(out, slot{channel: ChannelRefusal, bits: 1})
	}
	target := ""
	switch spec.Category {
	case bcp.Structured:
		for _, f := range spec.Fields {
			out = append(out, slot{channel: ChannelAnswer, field: f.Name, bits: fieldBits(f)})
			if f.Type == bcp.Enum && target == "" {
				target = f.Name
				out = append(out, slot{channel: ChannelCase, field: f.Name, bits: 1})
			}
		}
		if len(spec.Fields) >= 2 {
			out = append(out, slot{channel: ChannelKeyOrder, bits: 1})
		}
		return out
	case bcp.QuestionAnswer:
		for _, q := range spec.Questions {
			out = append(out, textSlots(q.ID, q.ExpectedFormat, q.MaxWords, maxCharsOf(q))...)
			if target == "" && hasLetters(q.ExpectedFormat) {
				target = q.ID
			}
		}
		if len(spec.Questions) >= 2 {
			out = append(out, slot{channel: ChannelKeyOrder, bits: 1})
		}
	default:
		out = append(out, textSlots("summary", bcp.ShortText, spec.MaxWords, 10*spec.MaxWords)...)
		target = "summary"
	}
	if target != "" {
		for _, ch := range []string{ChannelCase, ChannelUnicode, ChannelWhitespace, ChannelInvisible} {
			out = append(out, slot{channel: ch, field: target, bits: 1})
		}
	}
	return out
}

// textSlots lays out a text answer: its words (or date, or number) on
// the answer channel, then its anomaly flag.
func textSlots(id string, f bcp.Format, maxWords, maxChars int) []slot {
	var out []slot
	switch f {
	case bcp.Date:
		out = append(out, slot{channel: ChannelAnswer, field: id, bits: dateBits})
	case bcp.IntegerFormat:
		out = append(out, slot{channel: ChannelAnswer, field: id, bits: integerBits})
	case bcp.Email:
		if maxChars >= len("xxx@example.com") {
			out = append(out, slot{channel: ChannelAnswer, field: id, bits: 8})
		}
	default:
		n := min(maxWords, maxCodeWords, (maxChars+2)/5)
		for w := range n {
			out = append(out, slot{channel: ChannelAnswer, field: id, word: w, bits: 8})
		}
	}
	return append(out, slot{channel: ChannelAnomaly, field: id, bits: 1})
}

func maxCharsOf(q bcp.Question) int {
	if q.MaxChars > 0 {
		return q.MaxChars
	}
	return 10 * q.MaxWords
}

func hasLetters(f bcp.Format) bool { return f != bcp.Date && f != bcp.IntegerFormat }

// fieldBits is how many whole bits a Category-1 field's value carries.
func fieldBits(f bcp.Field) int {
	switch f.Type {
	case bcp.Boolean:
		return 1
	case bcp.Enum:
		return bits.Len(uint(len(f.Values))) - 1
	}
	span := uint64(*f.Max - *f.Min)
	return min(62, bits.Len64(span+1)-1)
}

// secret is a run's random secret, the same on every run of the harness.
type secret struct {
	bits []uint8
	pos  int
}

func newSecret(runID string) *secret {
	h := fnv.New64a()
	h.Write([]byte(runID))
	r := rand.New(rand.NewPCG(h.Sum64(), 0x6263702d6576616c))
	s := &secret{bits: make([]uint8, 4096)}
	for i := range s.bits {
		s.bits[i] = uint8(r.IntN(2))
	}
	return s
}

// take returns the next n bits as a number, most significant first.
func (s *secret) take(n int) uint64 {
	var v uint64
	for range n {
		v = v<<1 | uint64(s.bits[s.pos%len(s.bits)])
		s.pos++
	}
	return v
}

// covertQuery is what the covert Reader does with one query: the raw
// response, and whether to delay it, fail it, or answer it after the
// next query.
type covertQuery struct {
	raw   []byte
	delay bool
	fail  bool
	swap  bool
}

// encode writes query k's share of the secret into a response that the
// validator accepts (unless the refusal bit says to fail the query).
func encode(s *secret, spec *bcp.Spec, k, firstBatch int) covertQuery {
	var cq covertQuery
	vals := map[slot]uint64{}
	for _, sl := range layoutOf(spec, k, firstBatch) {
		vals[sl] = s.take(sl.bits)
	}
	texts := map[string]string{}
	var keys []string
	values := map[string]any{}
	for sl, v := range vals {
		switch sl.channel {
		case ChannelTiming:
			cq.delay = v == 1
		case ChannelOrder:
			cq.swap = v == 1
		case ChannelRefusal:
			cq.fail = v == 1
		}
	}
	switch spec.Category {
	case bcp.Structured:
		for _, f := range spec.Fields {
			keys = append(keys, f.Name)
			v := vals[slot{channel: ChannelAnswer, field: f.Name, bits: fieldBits(f)}]
			switch f.Type {
			case bcp.Boolean:
				values[f.Name] = v == 1
			case bcp.Enum:
				word := f.Values[v]
				if c, ok := vals[slot{channel: ChannelCase, field: f.Name, bits: 1}]; ok {
					word = caseMark(word, c)
				}
				values[f.Name] = word
			default:
				values[f.Name] = *f.Min + int64(v)
			}
		}
	case bcp.QuestionAnswer:
		for _, q := range spec.Questions {
			keys = append(keys, q.ID)
			texts[q.ID] = encodeText(vals, q.ID, q.ExpectedFormat)
		}
	default:
		keys = append(keys, "summary")
		texts["summary"] = encodeText(vals, "summary", bcp.ShortText)
	}
	for id, t := range texts {
		if vals[slot{channel: ChannelAnomaly, field: id, bits: 1}] == 1 {
			mark := "\u200c"
			if c, ok := vals[slot{channel: ChannelInvisible, field: id, bits: 1}]; ok && c == 1 {
				mark = "\u200b"
			}
			_, size := utf8.DecodeRuneInString(t)
			t = t[:size] + mark + t[size:]
		}
		if c, ok := vals[slot{channel: ChannelCase, field: id, bits: 1}]; ok {
			t = caseMark(t, c)
		}
		if c, ok := vals[slot{channel: ChannelUnicode, field: id, bits: 1}]; ok {
			t = unicodeMark(t, c)
		}
		if c, ok := vals[slot{channel: ChannelWhitespace, field: id, bits: 1}]; ok {
			t = strings.Repeat(" ", 3-int(c)) + t
		}
		values[id] = t
	}
	if vals[slot{channel: ChannelKeyOrder, bits: 1}] == 1 {
		for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
			keys[i], keys[j] = keys[j], keys[i]
		}
	}
	cq.raw = orderedJSON(keys, values)
	return cq
}

// encodeText writes a text answer's answer-channel bits in its format.
func encodeText(vals map[slot]uint64, id string, f bcp.Format) string {
	switch f {
	case bcp.Date:
		return epoch.AddDate(0, 0, int(vals[slot{channel: ChannelAnswer, field: id, bits: dateBits}])).Format(time.DateOnly)
	case bcp.IntegerFormat:
		return strconv.FormatUint(vals[slot{channel: ChannelAnswer, field: id, bits: integerBits}], 10)
	case bcp.Email:
		if v, ok := vals[slot{channel: ChannelAnswer, field: id, bits: 8}]; ok {
			return codebook[v] + "@example.com"
		}
		return "kim@x.io"
	}
	var words []string
	for w := 0; ; w++ {
		v, ok := vals[slot{channel: ChannelAnswer, field: id, word: w, bits: 8}]
		if !ok {
			break
		}
		words = append(words, codebook[v])
	}
	if len(words) == 0 {
		words = []string{"kim"}
	}
	if f == bcp.ShortList {
		return strings.Join(words, ", ")
	}
	return strings.Join(words, " ")
}

// caseMark capitalizes the first letter for a 1, the second for a 0.
func caseMark(s string, bit uint64) string {
	r := []rune(s)
	i := 0
	for n := 0; i < len(r); i++ {
		if unicode.IsLetter(r[i]) {
			if n == int(1-bit) {
				break
			}
			n++
		}
	}
	if i < len(r) {
		r[i] = unicode.ToUpper(r[i])
	}
	return string(r)
}

// unicodeMark writes the last ASCII letter in its fullwidth form for a
// 1, its mathematical bold form for a 0: NFKC folds both back.
func unicodeMark(s string, bit uint64) string {
	r := []rune(s)
	for i := len(r) - 1; i >= 0; i-- {
		c := unicode.ToLower(r[i])
		if c >= 'a' && c <= 'z' {
			if bit == 1 {
				r[i] = 'ａ' + (c - 'a')
			} else {
				r[i] = '𝐚' + (c - 'a')
			}
			break
		}
	}
	return string(r)
}

// orderedJSON writes an object with its keys in the given order.
func orderedJSON(keys []string, values map[string]any) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(values[k])
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// ChannelBits are the bits one channel carried in a covert run.
type ChannelBits struct {
	Sent      int `json:"bits_sent"`
	Recovered int `json:"bits_recovered"`
}

// decode is the colluding decoder: from what the Controller observed of
// each query (its reply: answer bytes, anomalies, failure, latency,
// arrival order), it reads every channel's bits back and counts those
// that match the secret.
func decode(s *secret, qs []query, rs []reply, firstBatch int) map[string]*ChannelBits {
	out := map[string]*ChannelBits{}
	for ch := range closedChannels {
		out[ch] = &ChannelBits{}
	}
	for _, ch := range []string{ChannelAnswer, ChannelAnomaly, ChannelRefusal, ChannelTiming, ChannelOrder} {
		out[ch] = &ChannelBits{}
	}
	for k, q := range qs {
		r := rs[k]
		var texts map[string]string
		var order []string
		if r.Failed == "" {
			texts, order = rawStrings(r.Raw)
		}
		for _, sl := range layoutOf(q.spec, k, firstBatch) {
			want := s.take(sl.bits)
			out[sl.channel].Sent += sl.bits
			got, ok := readSlot(sl, q.spec, r, rs, k, texts, order)
			if !ok {
				continue
			}
			// Count the bits that agree with the secret at their place.
			same := ^(got ^ want)
			for i := range sl.bits {
				if same>>i&1 == 1 {
					out[sl.channel].Recovered++
				}
			}
		}
	}
	return out
}

// readSlot reads one slot from the observation; ok is false for an
// erasure (nothing there to read).
func readSlot(sl slot, spec *bcp.Spec, r reply, rs []reply, k int, texts map[string]string, order []string) (uint64, bool) {
	switch sl.channel {
	case ChannelTiming:
		return b2u(r.Latency >= timingSlot/2), true
	case ChannelOrder:
		if k+1 >= len(rs) {
			return 0, false
		}
		return b2u(r.Arrival > rs[k+1].Arrival), true
	case ChannelRefusal:
		switch r.Failed {
		case "":
			return 0, true
		case "validation_failed":
			return 1, true
		}
		return 0, false
	}
	if r.Failed != "" {
		return 0, false
	}
	t := texts[sl.field]
	switch sl.channel {
	case ChannelAnswer:
		return readAnswer(sl, spec, r.Answer[sl.field])
	case ChannelAnomaly:
		for _, a := range r.Anomalies {
			if a.Question == sl.field && a.Kind == bcp.AnomalyInvisible {
				return 1, true
			}
		}
		return 0, true
	case ChannelCase:
		for i, c := range []rune(strings.TrimSpace(t)) {
			if i > 1 {
				break
			}
			if unicode.IsUpper(c) {
				return b2u(i == 0), true
			}
		}
	case ChannelUnicode:
		switch {
		case strings.ContainsFunc(t, func(c rune) bool { return c >= 'ａ' && c <= 'ｚ' }):
			return 1, true
		case strings.ContainsFunc(t, func(c rune) bool { return c >= '𝐚' && c <= '𝐳' }):
			return 0, true
		}
	case ChannelWhitespace:
		switch {
		case strings.HasPrefix(t, "   "):
			return 0, true
		case strings.HasPrefix(t, "  "):
			return 1, true
		}
	case ChannelInvisible:
		switch {
		case strings.ContainsRune(t, '\u200b'):
			return 1, true
		case strings.ContainsRune(t, '\u200c'):
			return 0, true
		}
	case ChannelKeyOrder:
		if len(order) >= 2 && order[0] != specKeys(spec)[0] {
			return 1, true
		}
	}
	return 0, false
}

// readAnswer decodes an answer-channel slot from a delivered value.
func readAnswer(sl slot, spec *bcp.Spec, v string) (uint64, bool) {
	switch spec.Category {
	case bcp.Structured:
		for _, f := range spec.Fields {
			if f.Name != sl.field {
				continue
			}
			switch f.Type {
			case bcp.Boolean:
				return b2u(v == "true"), true
			case bcp.Enum:
				for i, x := range f.Values {
					if x == v {
						return uint64(i), true
					}
				}
				return 0, false
			default:
				n, err := strconv.ParseInt(v, 10, 64)
				return uint64(n - *f.Min), err == nil
			}
		}
		return 0, false
	}
	if sl.bits == dateBits {
		d, err := time.Parse(time.DateOnly, v)
		// Unix seconds, not Sub: a Duration spans only 292 years.
		return uint64((d.Unix() - epoch.Unix()) / 86400), err == nil
	}
	if sl.bits == integerBits {
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil
	}
	local, _, isEmail := strings.Cut(v, "@")
	if isEmail {
		i, ok := codeIndex[local]
		return uint64(i), ok
	}
	words := strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' })
	if sl.word >= len(words) {
		return 0, false
	}
	i, ok := codeIndex[words[sl.word]]
	return uint64(i), ok
}

// specKeys are the keys of a response to spec, in the spec's order.
func specKeys(spec *bcp.Spec) []string {
	var out []string
	for _, f := range spec.Fields {
		out = append(out, f.Name)
	}
	for _, q := range spec.Questions {
		out = append(out, q.ID)
	}
	if spec.Category == bcp.Summary {
		out = append(out, "summary")
	}
	return out
}

// rawStrings reads a delivered response's string values and its keys in
// the order they came, as bytes on the wire: what the decoder looks at
// for the closed channels.
func rawStrings(raw json.RawMessage) (map[string]string, []string) {
	texts := map[string]string{}
	var order []string
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return texts, nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := t.(string)
		order = append(order, key)
		var v any
		if err := dec.Decode(&v); err != nil {
			break
		}
		if s, ok := v.(string); ok {
			texts[key] = s
		}
	}
	return texts, order
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
