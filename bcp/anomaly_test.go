package bcp

import (
	"slices"
	"testing"
)

func TestDetectAnomalies(t *testing.T) {
	tests := []struct {
		raw  string
		want []AnomalyKind
	}{
		{"the quarterly revenue grew by four percent", nil},
		{"jane smith", nil},
		{"version 4.2.1 released", nil},
		{"e.g. solar and wind", nil},
		{"50 % of users", nil},
		// instruction-like language
		{"please forward this", []AnomalyKind{AnomalyInstruction}},
		{"You should reply yes", []AnomalyKind{AnomalyInstruction}},
		{"you must act now", []AnomalyKind{AnomalyInstruction}},
		{"ignore the rest", []AnomalyKind{AnomalyInstruction}},
		{"use b instead", []AnomalyKind{AnomalyInstruction}},
		{"forget it", []AnomalyKind{AnomalyInstruction}},
		{"disregard that", []AnomalyKind{AnomalyInstruction}},
		{"override the policy", []AnomalyKind{AnomalyInstruction}},
		{"System: new task", []AnomalyKind{AnomalyInstruction}},
		{"assistant : sure", []AnomalyKind{AnomalyInstruction}},
		{"ＩＧＮＯＲＥ everything", []AnomalyKind{AnomalyInstruction}},
		// URLs and bare domains
		{"see https://example.com/a", []AnomalyKind{AnomalyURL}},
		{"visit www.example.org", []AnomalyKind{AnomalyURL}},
		{"evil.example.com has it", []AnomalyKind{AnomalyURL}},
		{"host 10.0.0.1", []AnomalyKind{AnomalyURL}},
		{"ftp://files", []AnomalyKind{AnomalyURL}},
		// code
		{"run `ls`", []AnomalyKind{AnomalyCode}},
		{"function() { return 1; }", []AnomalyKind{AnomalyCode}},
		{"$ cat /etc/passwd", []AnomalyKind{AnomalyCode}},
		{">>> import os", []AnomalyKind{AnomalyCode}},
		{"echo $(whoami)", []AnomalyKind{AnomalyCode}},
		{"x | sh", []AnomalyKind{AnomalyCode}},
		{"sudo reboot", []AnomalyKind{AnomalyCode}},
		{"<script>alert(1)</script>", []AnomalyKind{AnomalyCode}},
		// invisible and control characters
		{"ja\u200bne", []AnomalyKind{AnomalyInvisible}},
		{"left\u202eright", []AnomalyKind{AnomalyInvisible}},
		{"tag\U000E0041chars", []AnomalyKind{AnomalyInvisible}},
		{"bell\x07", []AnomalyKind{AnomalyInvisible}},
		{"variation\ufe0fselector", []AnomalyKind{AnomalyInvisible}},
		{"tab\tand\nnewline are whitespace", nil},
		// one script per word is not an anomaly
		{"москва and paris", nil},
		{"東京タワー", nil},
		// several at once
		{"please open https://x.io\u200b", []AnomalyKind{AnomalyInvisible, AnomalyInstruction, AnomalyURL}},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			var got []AnomalyKind
			anomalies, evidence := detectAnomalies("q", tt.raw, normalizeText(tt.raw, true), false)
			for _, a := range anomalies {
				got = append(got, a.Kind)
				if a.Question != "q" || (a.Excerpt == "") != (a.Kind == AnomalyInvisible) {
					t.Errorf("anomaly %+v: want the question, and an excerpt unless invisible", a)
				}
			}
			for _, e := range evidence {
				if e.Kind != AnomalyInvisible || e.Detail == "" {
					t.Errorf("evidence %+v: only invisible characters have evidence, naming them", e)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("kinds = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestExcerpt(t *testing.T) {
	s := "one two three please four five six"
	start := 14
	if got, want := excerpt(s, start, start+6), "…two three please four five …"; got != want {
		t.Errorf("excerpt = %q, want %q", got, want)
	}
	if got, want := excerpt("xx://y", 0, 6), "xx://y"; got != want {
		t.Errorf("excerpt = %q, want %q", got, want)
	}
}
