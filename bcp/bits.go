package bcp

import (
	"math"
	"strconv"
)

// Bits is an amount of information: the capacity of a channel, the cost of
// a query or the content of a response. Fractional because an enum of three
// values carries log2(3) ≈ 1.585 bits.
type Bits float64

// BitsPerWord is the spec's estimate of what one word of text can carry.
const BitsPerWord Bits = 11

// String formats b with one decimal, as "6.9 bits".
func (b Bits) String() string {
	return strconv.FormatFloat(float64(b), 'f', 1, 64) + " bits"
}

// Cost is the field's capacity: 1 bit for a boolean, log2(N) for an enum of
// N distinct values, log2(max − min + 1) for an integer. A field whose spec
// is incomplete costs 0; [Spec.Check] rejects it anyway.
func (f *Field) Cost() Bits {
	switch f.Type {
	case Boolean:
		return 1
	case Enum:
		distinct := map[string]bool{}
		for _, v := range f.Values {
			distinct[foldKey(v)] = true
		}
		if len(distinct) == 0 {
			return 0
		}
		return Bits(math.Log2(float64(len(distinct))))
	case Integer:
		if f.Min == nil || f.Max == nil || *f.Min > *f.Max {
			return 0
		}
		// Unsigned subtraction gives the span even when max − min
		// overflows int64; the full int64 range is exactly 64 bits.
		span := uint64(*f.Max) - uint64(*f.Min)
		if span == math.MaxUint64 {
			return 64
		}
		return Bits(math.Log2(float64(span) + 1))
	}
	return 0
}

// Cost is the spec's declared bandwidth: the sum of its fields' costs in
// Category 1, and 11 bits × max_words for every Category-2 question and for
// a Category-3 summary. It is known before the query is sent, so a budget is
// charged up front.
func (s *Spec) Cost() Bits {
	var total Bits
	switch s.Category {
	case Structured:
		for i := range s.Fields {
			total += s.Fields[i].Cost()
		}
	case QuestionAnswer:
		for i := range s.Questions {
			total += BitsPerWord * Bits(max(s.questionMaxWords(&s.Questions[i]), 0))
		}
	case Summary:
		total = BitsPerWord * Bits(max(s.MaxWords, 0))
	}
	return total
}
