package jsonscan_test

import (
	"fmt"

	"github.com/bub-bus/bub/internal/jsonscan"
)

// A string whose bytes are its contents needs no decoding: Plain hands
// them out in place, and String is needed only for the others.
func ExamplePlain() {
	for _, raw := range []string{`"bench:t1"`, `"caf\u00e9"`, `42`} {
		inner, ok := jsonscan.Plain([]byte(raw))
		s, isString := jsonscan.String([]byte(raw))
		fmt.Printf("%s: plain %q %v, string %q %v\n", raw, inner, ok, s, isString)
	}
	// Output:
	// "bench:t1": plain "bench:t1" true, string "bench:t1" true
	// "caf\u00e9": plain "" false, string "café" true
	// 42: plain "" false, string "" false
}
