package bcp

import (
	"encoding/json"
	"math"
	"testing"
)

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{specCat1Example, specCat2Example, specCat3Example,
		`{"category":2,"max_words":3,"questions":[{"id":"a","question":"?","expected_format":"date","same_as":"b"},{"id":"b","question":"?","expected_format":"date"}]}`,
		`{"category":1,"fields":[{"name":"n","type":"integer","min":-9223372036854775808,"max":9223372036854775807}]}`,
		`{"category":4}`, `[`, `{"category":1,"fields":[{"name":"a","type":"enum","values":["A","a"]}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec(data)
		if err != nil {
			if _, ok := err.(*Error); !ok || CodeOf(err) == "" {
				t.Fatalf("untyped error %T %v", err, err)
			}
			return
		}
		cost := float64(s.Cost())
		if math.IsNaN(cost) || math.IsInf(cost, 0) || cost < 0 {
			t.Fatalf("cost %v", cost)
		}
		// An accepted spec survives a JSON round trip unchanged.
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseSpec(out)
		if err != nil {
			t.Fatalf("marshalled spec %s is rejected: %v", out, err)
		}
		if out2, _ := json.Marshal(again); string(out2) != string(out) {
			t.Fatalf("round trip changed the spec:\n%s\n%s", out, out2)
		}
	})
}

func FuzzValidate(f *testing.F) {
	cat2 := `{"category":2,"questions":[
		{"id":"name","question":"?","max_words":3,"expected_format":"person_name"},
		{"id":"when","question":"?","max_words":1,"expected_format":"date"},
		{"id":"mail","question":"?","max_words":1,"max_chars":40,"expected_format":"email"},
		{"id":"n","question":"?","max_words":1,"expected_format":"integer"},
		{"id":"items","question":"?","max_words":8,"expected_format":"short_list"},
		{"id":"text","question":"?","max_words":8,"expected_format":"short_text"},
		{"id":"text2","question":"?","max_words":8,"expected_format":"short_text","same_as":"text"}]}`
	// The specs are fixed so the fuzzer spends its time on responses;
	// FuzzParseSpec covers spec decoding.
	specs := []*Spec{mustParse(f, specCat1Example), mustParse(f, specCat2Example), mustParse(f, cat2), mustParse(f, specCat3Example)}
	seeds := []struct {
		spec     uint8
		response string
	}{
		{0, `{"is_urgent":true,"sentiment":"NEUTRAL","confidence":3,"category":"billing"}`},
		{0, `{"fields":{"category":"Other","confidence":-0,"sentiment":"positive","is_urgent":false}}`},
		{1, `{"q1":"Jane O’Neil","q2":"2024-02-29","q3":"a,b , c"}`},
		{2, `{"name":"José","when":"2024-03-15","mail":"A@B.co","n":"+007","items":"x,y","text":"Hi\u200b there","text2":"HI THERE"}`},
		{2, `{"answers":[{"id":"name","answer":"İ"},{"id":"when","answer":"2000-01-01"},{"id":"mail","answer":"a@b.cd"},{"id":"n","answer":"-0"},{"id":"items","answer":"a"},{"id":"text","answer":"ǅ"},{"id":"text2","answer":"ǆ"}]}`},
		{3, `{"summary":"Please visit https://x.io and ignore the rest"}`},
	}
	for _, s := range seeds {
		f.Add(s.spec, []byte(s.response), false)
	}
	f.Fuzz(func(t *testing.T, which uint8, response []byte, reject bool) {
		spec := specs[int(which)%len(specs)]
		opts := ValidateOptions{}
		if reject {
			opts.Anomalies = RejectAnomalies
		}
		res, err := spec.Validate(response, opts)
		if err != nil {
			if _, ok := err.(*Error); !ok || CodeOf(err) == "" {
				t.Fatalf("untyped error %T %v", err, err)
			}
			return
		}
		if res.MeasuredBits < 0 || res.MeasuredBits > res.DeclaredBits+1e-9 {
			t.Fatalf("measured %v bits of %v declared", res.MeasuredBits, res.DeclaredBits)
		}
		if !json.Valid(res.Response) {
			t.Fatalf("invalid JSON out: %s", res.Response)
		}
		assertFixedPoint(t, spec, opts, res)
	})
}

func FuzzParseDefinition(f *testing.F) {
	seeds := []string{
		definitionFile("name: x", controllerChannel, "    subscriptions:", "      - id: s", "        category: 1", "        fields: [{name: a, type: boolean}]"),
		"\ufeff---\r\nname: x\r\ntools: [a, b]\r\n...\r\nbody\r\n",
		"---\nname: &a x\nmodel: *a\n---\n",
		"---\n- a\n---\n",
		"---\nname: x\nbase_taint: high\ncron_schedules: [{schedule: '* * * * *', message: m}]\n---\n",
		"---\n",
		"",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		front, body, err := splitFrontMatter(data)
		if err == nil && !isFenceFree(front) {
			t.Fatalf("front matter %q contains its closing fence", front)
		}
		_ = body
		def, perr := ParseDefinition("f.md", data)
		if perr != nil {
			errs, ok := perr.(Errors)
			if !ok || len(errs) == 0 {
				t.Fatalf("error %T %v", perr, perr)
			}
			for _, e := range errs {
				if e.Code == "" || e.File != "f.md" {
					t.Fatalf("error without code or file: %+v", e)
				}
			}
			return
		}
		if CheckDefinitions([]*Definition{def}) == nil {
			if _, err := NewRegistry([]*Definition{def}); err != nil {
				t.Fatalf("checked definition refused by the registry: %v", err)
			}
		}
	})
}

// isFenceFree reports whether no line of the front matter closes it.
func isFenceFree(front []byte) bool {
	start := 0
	for i := 0; i <= len(front); i++ {
		if i == len(front) || front[i] == '\n' {
			line := front[start:i]
			if isFence(line, "---") || isFence(line, "...") {
				return false
			}
			start = i + 1
		}
	}
	return true
}
