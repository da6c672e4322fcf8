package bus

import (
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bub-bus/bub/protocol"
)

// subscription is one subscribe call: a pattern held by a connection,
// with its propagation policy. seq orders subscriptions by age across the
// whole bus; last match wins means the highest seq comes first.
type subscription struct {
	// seq is the subscription's revision in the cluster's order; key
	// names it there.
	seq      uint64
	key      string
	pattern  *protocol.Pattern
	policy   protocol.Policy
	fallback bool
	// durable is set for a durable subscription held by its owner's
	// connection (durable_sub.go); guarded by the connection's mu.
	durable bool
	to      subscriber
}

// router is the bus's subscription table: every subscription in the order
// it was made, indexed so that finding a topic's matches does not scan the
// table. Exact patterns sit in a map by topic; prefix patterns in a map by
// prefix, probed at each ':' and '-' of the topic; glob patterns in
// buckets by their literal head, probed once per distinct head length.
//
// A glob whose head is short or empty (`*?x123*`) would land in a bucket
// probed on every publish and matched against every topic, so one
// connection with many such patterns made every publish, and every
// subscribe (whose lifecycle event is a publish), cost as much as all of
// them: subscribing n of them was quadratic. Such a glob is indexed
// instead by a gram, the first bytes of the longest literal run it
// requires, probed at each position of the topic (see gramOf). Only globs
// with no literal at all are scanned on every publish.
type router struct {
	// mu guards everything below.
	mu       sync.RWMutex
	exact    map[string][]*subscription
	prefix   map[string][]*subscription
	globs    map[string][]*subscription
	globLens map[int]int // literal head length → number of glob subscriptions with it
	grams    map[string][]*subscription
	gramLens map[int]int // gram length → number of glob subscriptions with it
	// gen counts the changes to the table; written under mu, so a reader
	// holding the read lock sees the generation of what it reads.
	gen atomic.Uint64
	// routes caches chains by topic (route).
	routes routeCache
}

func newRouter() *router {
	return &router{
		exact:    make(map[string][]*subscription),
		prefix:   make(map[string][]*subscription),
		globs:    make(map[string][]*subscription),
		globLens: make(map[int]int),
		grams:    make(map[string][]*subscription),
		gramLens: make(map[int]int),
	}
}

// maxGram bounds the gram a glob is indexed by: long enough to be
// selective, short enough that probing every position of a topic stays
// a few map lookups per byte.
const maxGram = 4

// gramOf returns the gram to index a glob under, or "" to index it by its
// literal head: the first maxGram bytes of the longest run of literal
// bytes the pattern has before any class, when that is longer than its
// head. Every topic the pattern matches contains such a run, since '*'
// and '?' stand for whole characters and the reserved characters rule out
// escapes and alternatives. Runs after a '[' are not used: where a class
// ends is the glob engine's business.
func gramOf(p *protocol.Pattern) string {
	raw, head := p.String(), len(p.Literal())
	if i := strings.IndexByte(raw, '['); i >= 0 {
		raw = raw[:i]
	}
	best := ""
	for run := range strings.FieldsFuncSeq(raw, func(r rune) bool { return r == '*' || r == '?' }) {
		if len(run) > len(best) {
			best = run
		}
	}
	if len(best) > maxGram {
		best = best[:maxGram]
	}
	if len(best) <= head {
		return ""
	}
	return best
}

// insert adds a subscription whose seq, its revision in the cluster's
// order (cluster.go), is set.
func (r *router) insert(s *subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.insertLocked(s)
}

func (r *router) insertLocked(s *subscription) {
	r.gen.Add(1)
	p := s.pattern
	switch p.Kind() {
	case protocol.Exact:
		r.exact[p.String()] = append(r.exact[p.String()], s)
	case protocol.Prefix:
		r.prefix[p.String()] = append(r.prefix[p.String()], s)
	default:
		if gram := gramOf(p); gram != "" {
			r.grams[gram] = append(r.grams[gram], s)
			r.gramLens[len(gram)]++
			break
		}
		head := p.Literal()
		r.globs[head] = append(r.globs[head], s)
		r.globLens[len(head)]++
	}
}

// remove deletes a subscription; removing one twice is harmless.
func (r *router) remove(s *subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(s)
}

func (r *router) removeLocked(s *subscription) {
	r.gen.Add(1)
	switch s.pattern.Kind() {
	case protocol.Exact:
		removeFrom(r.exact, s.pattern.String(), s)
	case protocol.Prefix:
		removeFrom(r.prefix, s.pattern.String(), s)
	default:
		if gram := gramOf(s.pattern); gram != "" {
			if removeFrom(r.grams, gram, s) {
				if r.gramLens[len(gram)]--; r.gramLens[len(gram)] == 0 {
					delete(r.gramLens, len(gram))
				}
			}
			break
		}
		head := s.pattern.Literal()
		if removeFrom(r.globs, head, s) {
			if r.globLens[len(head)]--; r.globLens[len(head)] == 0 {
				delete(r.globLens, len(head))
			}
		}
	}
}

func removeFrom(index map[string][]*subscription, key string, s *subscription) bool {
	list := index[key]
	i := slices.Index(list, s)
	if i < 0 {
		return false
	}
	list = slices.Delete(list, i, i+1)
	if len(list) == 0 {
		delete(index, key)
	} else {
		index[key] = list
	}
	return true
}

// route returns the routing chain for topic, first to be called first:
// the matching subscriptions from newest to oldest, where of several
// subscriptions with the identical pattern string only the newest counts,
// and a client appears once, at its newest matching subscription. Fallback
// subscriptions make the chain only when no regular one matches.
func (r *router) route(topic string) []*subscription {
	c := &r.routes
	c.mu.Lock()
	if chain, ok := c.chains[topic]; ok && c.gen == r.gen.Load() {
		// The caller owns what route returns (events.go filters it in
		// place).
		chain = slices.Clone(chain)
		c.mu.Unlock()
		return chain
	}
	c.mu.Unlock()
	var gen uint64
	var matches []*subscription
	for s := range r.matching(topic, &gen) {
		matches = append(matches, s)
	}
	chain := routeChain(matches)
	c.keep(topic, chain, gen)
	return chain
}

// routeCache keeps the chains of the topics routed last, for the
// generation of the table they were made from, as NATS keeps the results
// of its sublist: without it, every publish to a fan-out's topic matched
// its thousand patterns and sorted their subscriptions again.
type routeCache struct {
	mu     sync.Mutex
	gen    uint64
	chains map[string][]*subscription
	// size counts what chains holds: a subscription per chain member, and
	// one for each empty chain.
	size int
}

// maxRouteCache bounds routeCache.size: past it, the cache starts over.
const maxRouteCache = 1 << 16

// keep caches chain, topic's as the table was at generation gen, unless
// the cache holds a later generation already.
func (c *routeCache) keep(topic string, chain []*subscription, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.chains == nil:
		c.chains = make(map[string][]*subscription)
	case gen < c.gen:
		return
	}
	n := max(len(chain), 1)
	if gen > c.gen || c.size+n > maxRouteCache {
		clear(c.chains)
		c.gen, c.size = gen, 0
	}
	if _, ok := c.chains[topic]; !ok {
		c.chains[topic] = slices.Clone(chain)
		c.size += n
	}
}

// routeChain orders matches, the subscriptions matching a topic, into its
// routing chain (route).
func routeChain(matches []*subscription) []*subscription {
	regular := 0
	for _, s := range matches {
		if !s.fallback {
			matches[regular] = s
			regular++
		}
	}
	if regular > 0 {
		matches = matches[:regular]
	}
	if len(matches) <= 1 {
		return matches
	}
	slices.SortFunc(matches, func(a, b *subscription) int {
		switch {
		case a.seq > b.seq:
			return -1
		case a.seq < b.seq:
			return 1
		}
		return 0
	})
	chain := matches[:0]
	patterns := make(map[string]struct{}, len(matches))
	clients := make(map[string]struct{}, len(matches))
	for _, s := range matches {
		if _, dup := patterns[s.pattern.String()]; dup {
			continue
		}
		patterns[s.pattern.String()] = struct{}{}
		client := s.to.held().clientID
		if _, dup := clients[client]; dup {
			continue
		}
		clients[client] = struct{}{}
		chain = append(chain, s)
	}
	return chain
}

// anyCache remembers whether a topic had any subscription, and at which
// generation of the table (router.gen): the answer holds until the table
// changes. The zero value knows nothing.
type anyCache struct {
	// v is the generation times two, plus one when a subscription
	// matched; 0 before the first answer.
	v atomic.Uint64
}

// matchesAny reports whether any subscription matches topic, so that the
// topic's chain is not empty, without building the chain, and from cache
// while the table has not changed since cache was filled: a bus event
// nobody listens to is not encoded, and countDelivery asks twice per
// delivery.
func (r *router) matchesAny(topic string, cache *anyCache) bool {
	if v := cache.v.Load(); v != 0 && v>>1 == r.gen.Load()+1 {
		return v&1 == 1
	}
	found := false
	var gen uint64
	for range r.matching(topic, &gen) {
		found = true
		break
	}
	v := (gen + 1) << 1
	if found {
		v |= 1
	}
	cache.v.Store(v)
	return found
}

// matching yields every subscription whose pattern matches topic, in no
// order, under the read lock, and sets *gen, unless gen is nil, to the
// generation of the table it reads. The lock is released by defer: route
// runs inside guard, which recovers a panic, and a read lock left held
// would block every later subscribe.
func (r *router) matching(topic string, gen *uint64) iter.Seq[*subscription] {
	return func(yield func(*subscription) bool) {
		r.mu.RLock()
		defer r.mu.RUnlock()
		if gen != nil {
			*gen = r.gen.Load()
		}
		for _, s := range r.exact[topic] {
			if !yield(s) {
				return
			}
		}
		for i := 0; i < len(topic); i++ {
			if c := topic[i]; c == ':' || c == '-' {
				for _, s := range r.prefix[topic[:i+1]] {
					if !yield(s) {
						return
					}
				}
			}
		}
		for n := range r.globLens {
			if n > len(topic) {
				continue
			}
			for _, s := range r.globs[topic[:n]] {
				if s.pattern.Match(topic) && !yield(s) {
					return
				}
			}
		}
		for n := range r.gramLens {
			for i := 0; i+n <= len(topic); i++ {
				gram := topic[i : i+n]
				list := r.grams[gram]
				// A gram that occurs twice in the topic is probed at its
				// first occurrence only, so no subscription is matched
				// twice.
				if len(list) == 0 || strings.Index(topic, gram) < i {
					continue
				}
				for _, s := range list {
					if s.pattern.Match(topic) && !yield(s) {
						return
					}
				}
			}
		}
	}
}
