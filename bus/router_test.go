package bus

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bub-bus/bub/protocol"
)

// testSeq numbers the subscriptions add makes, as a node's order would.
var testSeq atomic.Uint64

// testConn is a connection the router can hold, clientID its only state.
func testConn(clientID string) *conn { return &conn{holding: holding{clientID: clientID}} }

// add inserts a subscription as the newest and returns it.
func (r *router) add(c *conn, p *protocol.Pattern, policy protocol.Policy, fallback bool) *subscription {
	s := &subscription{seq: testSeq.Add(1), pattern: p, policy: policy, fallback: fallback, to: c}
	r.insert(s)
	return s
}

// applySteps runs the subscribe and unsubscribe steps of a routing
// scenario: "A inbound:*" subscribes client A, "A ~inbound:*" subscribes it
// as a fallback, "-A inbound:*" removes A's subscription.
func applySteps(t *testing.T, r *router, steps []string) {
	t.Helper()
	conns := map[string]*conn{}
	held := map[string]*subscription{}
	for _, step := range steps {
		client, pattern, _ := strings.Cut(step, " ")
		if name, ok := strings.CutPrefix(client, "-"); ok {
			s := held[name+" "+pattern]
			if s == nil {
				t.Fatalf("step %q: not subscribed", step)
			}
			r.remove(s)
			delete(held, name+" "+pattern)
			continue
		}
		c := conns[client]
		if c == nil {
			c = testConn(client)
			conns[client] = c
		}
		raw, fallback := strings.CutPrefix(pattern, "~")
		p, err := protocol.ParsePattern(raw)
		if err != nil {
			t.Fatalf("step %q: %v", step, err)
		}
		held[client+" "+pattern] = r.add(c, p, protocol.PolicyContinueAll, fallback)
	}
}

func chainOf(r *router, topic string) string {
	var out []string
	for _, s := range r.route(topic) {
		out = append(out, s.to.held().clientID)
	}
	return strings.Join(out, ",")
}

func TestRouteLastMatchWins(t *testing.T) {
	tests := []struct {
		name  string
		steps []string
		topic string
		want  string // clients in delivery order
	}{
		// The spec's example, verbatim.
		{"spec critical", []string{"A inbound:*", "B inbound:critical", "C inbound:*"}, "inbound:critical", "C,B"},
		{"spec normal", []string{"A inbound:*", "B inbound:critical", "C inbound:*"}, "inbound:normal", "C"},
		{"newest first", []string{"A x:a", "B x:*", "C x:?"}, "x:a", "C,B,A"},
		{"identical pattern: newest only", []string{"A x:*", "B x:*"}, "x:1", "B"},
		{"newer duplicate gone, older counts again", []string{"A x:*", "B x:*", "-B x:*"}, "x:1", "A"},
		{"client once at its newest match", []string{"A x:a", "B x:*", "A x:?"}, "x:a", "A,B"},
		{"client once, older pattern shadowed", []string{"B x:a", "A x:*", "B x:*"}, "x:a", "B"},
		{"no match", []string{"A x:*"}, "y:1", ""},
		{"unsubscribe", []string{"A x:a", "-A x:a"}, "x:a", ""},
		{"exact does not match longer", []string{"A inbound:chat-1"}, "inbound:chat-10", ""},
		{"prefix with dash", []string{"A inbound:chat-"}, "inbound:chat-1", "A"},
		{"prefix matches itself", []string{"A inbound:chat-"}, "inbound:chat-", "A"},
		{"prefix with colon", []string{"A inbound:"}, "inbound:x:y", "A"},
		{"prefix must be a prefix", []string{"A inbound:"}, "inbound", ""},
		{"star crosses colons", []string{"A inbound:*"}, "inbound:a:b", "A"},
		{"star matches empty", []string{"A inbound:*"}, "inbound:", "A"},
		{"question one char", []string{"A tg:?"}, "tg:12", ""},
		{"class", []string{"A tg:[0-9]*"}, "tg:123", "A"},
		{"negated class", []string{"A tg:[!0-9]*"}, "tg:123", ""},
		{"star in the middle", []string{"A a*z"}, "abcz", "A"},
		{"star alone", []string{"A *"}, "anything:at-all", "A"},
		{"x*x needs two x", []string{"A x*x"}, "x", ""},
		{"mixed kinds ordered by age", []string{"A tg:1", "B tg:", "C tg:*", "D *"}, "tg:1", "D,C,B,A"},
		{"fallback only without regular", []string{"S ~tg:*", "A tg:1"}, "tg:2", "S"},
		{"regular shadows fallback", []string{"S ~tg:*", "A tg:1"}, "tg:1", "A"},
		{"newer fallback shadowed too", []string{"A tg:1", "S ~tg:*"}, "tg:1", "A"},
		{"fallbacks last match wins", []string{"S ~tg:*", "T ~tg:?", "U ~x:*"}, "tg:1", "T,S"},
		{"fallback gone", []string{"S ~tg:*", "-S ~tg:*"}, "tg:1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRouter()
			applySteps(t, r, tt.steps)
			if got := chainOf(r, tt.topic); got != tt.want {
				t.Errorf("route(%q) = %q, want %q", tt.topic, got, tt.want)
			}
		})
	}
}

func TestRouterCountsAndRemoveTwice(t *testing.T) {
	r := newRouter()
	c := testConn("A")
	var subs []*subscription
	for _, p := range []string{"a", "a:", "a:*"} {
		pat, _ := protocol.ParsePattern(p)
		subs = append(subs, r.add(c, pat, protocol.PolicyContinueAll, false))
	}
	if r.size() != 3 {
		t.Fatalf("size = %d, want 3", r.size())
	}
	for _, s := range subs {
		r.remove(s)
		r.remove(s)
	}
	if r.size() != 0 || len(r.exact)+len(r.prefix)+len(r.globs)+len(r.globLens) != 0 {
		t.Fatalf("router not empty after removing all: size %d, %d %d %d %d", r.size(), len(r.exact), len(r.prefix), len(r.globs), len(r.globLens))
	}
}

// benchRouter fills a router with n exact subscriptions, plus a few of
// every other kind, as many agents each on their own topic would.
func benchRouter(b *testing.B, n int) *router {
	r := newRouter()
	for i := range n {
		p, _ := protocol.ParsePattern(fmt.Sprintf("agent:agent-%d", i))
		r.add(testConn(fmt.Sprintf("agent-%d", i)), p, protocol.PolicyStopOnProcessed, false)
	}
	for _, s := range []string{"inbound:*", "outbound:", "tg:[0-9]*", "system:*"} {
		p, _ := protocol.ParsePattern(s)
		r.add(testConn("bridge-"+s), p, protocol.PolicyStopOnProcessed, false)
	}
	return r
}

func BenchmarkRoute(b *testing.B) {
	for _, n := range []int{10, 10000} {
		r := benchRouter(b, n)
		topic := fmt.Sprintf("agent:agent-%d", n/2)
		b.Run(fmt.Sprintf("exact/subs=%d", n), func(b *testing.B) {
			for b.Loop() {
				if len(r.route(topic)) != 1 {
					b.Fatal("no route")
				}
			}
		})
	}
	mixed := newRouter()
	for i := range 10000 {
		var s string
		switch i % 3 {
		case 0:
			s = fmt.Sprintf("agent:a%d", i)
		case 1:
			s = fmt.Sprintf("tg:%d:", i)
		default:
			s = fmt.Sprintf("task:%d:*", i)
		}
		p, _ := protocol.ParsePattern(s)
		mixed.add(testConn(fmt.Sprintf("c%d", i)), p, protocol.PolicyStopOnProcessed, false)
	}
	for _, topic := range []string{"agent:a3000", "tg:3001:x", "task:3002:y", "nothing:here"} {
		b.Run("mixed/subs=10000/"+topic, func(b *testing.B) {
			for b.Loop() {
				mixed.route(topic)
			}
		})
	}
}

// TestRouteIndexMatchesScan checks the index against the definition: a
// topic's matches are exactly the patterns that match it, whichever
// bucket (exact, prefix, head, gram or scan) each pattern sits in.
func TestRouteIndexMatchesScan(t *testing.T) {
	patterns := []string{
		"*", "?", "*?*", "a*", "ab*", "agent:*", "*Z12*", "*?*?Z12*", "?Z1*", "*Z1", "*Z12", "Z12*x",
		"*abcdef*", "*cde*", "ag?nt:*", "*:x-1", "*x-1*", "[ab]*", "*[xz]12*", "*Z[0-9]*", "x*y*Z12*",
		"*aaaa*", "*aa*aa*", "a*a", "agent:x", "agent:", "agent-", "*ZZ*",
	}
	topics := []string{
		"a", "ab", "abcdefg", "agent:x", "agent:x-1", "Z12", "Z1", "xZ12y", "aZ12Z12", "aaaa", "aaaaa",
		"system:client.subscribed", "aZ1", "bZ99", "xyZ12", "ZZ", "agent:aaaa", "Z12Z12Z12", "az1",
	}
	r := newRouter()
	var subs []*subscription
	for _, raw := range patterns {
		p, err := protocol.ParsePattern(raw)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, r.add(testConn(raw), p, protocol.PolicyContinueAll, false))
	}
	// The caches outlive the removals below, so an answer kept past a
	// change of the table would show.
	caches := make(map[string]*anyCache)
	check := func() {
		t.Helper()
		for _, topic := range topics {
			want := map[string]bool{}
			for _, s := range subs {
				if s.pattern.Match(topic) {
					want[s.pattern.String()] = true
				}
			}
			if caches[topic] == nil {
				caches[topic] = new(anyCache)
			}
			for range 2 { // filling the cache, then from it
				if got := r.matchesAny(topic, caches[topic]); got != (len(want) > 0) {
					t.Errorf("topic %q: matchesAny %v, want %v", topic, got, len(want) > 0)
				}
			}
			// The first route fills the cache, the second reads it: the
			// caller owns what it gets, so clearing the first changes
			// nothing.
			clear(r.route(topic))
			got := map[string]bool{}
			for _, s := range r.route(topic) {
				if got[s.pattern.String()] {
					t.Errorf("topic %q: %q routed twice", topic, s.pattern)
				}
				got[s.pattern.String()] = true
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("topic %q: routed to %v, want %v", topic, got, want)
			}
		}
	}
	check()
	// Removal leaves the index consistent.
	for i := 0; i < len(subs); i += 2 {
		r.remove(subs[i])
	}
	subs = slicesDeleteEven(subs)
	check()
	if r.size() != len(subs) || len(r.grams) == 0 {
		t.Errorf("size %d, want %d; %d grams", r.size(), len(subs), len(r.grams))
	}
	// Down to nothing, then one again: matchesAny follows.
	for _, s := range subs {
		r.remove(s)
	}
	subs = nil
	check()
	p, err := protocol.ParsePattern("*")
	if err != nil {
		t.Fatal(err)
	}
	subs = append(subs, r.add(testConn("*"), p, protocol.PolicyContinueAll, false))
	check()
	if r.size() != len(subs) {
		t.Errorf("size %d, want %d", r.size(), len(subs))
	}
}

func slicesDeleteEven(subs []*subscription) []*subscription {
	var out []*subscription
	for i, s := range subs {
		if i%2 == 1 {
			out = append(out, s)
		}
	}
	return out
}

// size returns the number of subscriptions: each is indexed once, by its
// exact topic, prefix, glob head or gram.
func (r *router) size() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, index := range []map[string][]*subscription{r.exact, r.prefix, r.globs, r.grams} {
		for _, subs := range index {
			n += len(subs)
		}
	}
	return n
}
