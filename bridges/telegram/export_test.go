package telegram

import "time"

// WithTimings shortens o's typing renewal and retry backoff cap, which
// users do not choose, for tests.
func WithTimings(o *Options, typing, retryMax time.Duration) *Options {
	o.typingInterval, o.retryMax = typing, retryMax
	return o
}
