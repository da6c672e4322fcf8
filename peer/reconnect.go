package peer

import (
	"context"
	"fmt"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/internal/backoff"
	"github.com/bub-bus/bub/internal/redact"
	"github.com/bub-bus/bub/protocol"
)

// supervise watches the current session and replaces it when it drops,
// until the Conn ends.
func (c *Conn) supervise(s *session) {
	defer c.work.Done()
	for s != nil {
		select {
		case <-s.done:
		case <-c.ctx.Done():
			return
		}
		s = c.lost(s)
	}
}

// lost handles the end of session s and returns the session that replaces
// it, or nil when the Conn ends instead.
func (c *Conn) lost(s *session) *session {
	c.mu.Lock()
	if c.session == s {
		c.session = nil
	}
	ended := c.ended
	c.mu.Unlock()
	if ended {
		return nil
	}
	cause := s.cause()
	switch {
	case websocket.CloseStatus(cause) == protocol.CloseTakenOver:
		c.log.Warn("the bus closed this connection: a newer one took over the clientId; not reconnecting")
		c.end(ErrTakenOver)
		return nil
	case websocket.CloseStatus(cause) == protocol.CloseCredentialRevoked, websocket.CloseStatus(cause) == protocol.ClosePermissionsChanged:
		c.log.Warn("the bus closed this connection: its credential was revoked or narrowed; not reconnecting", "err", cause)
		c.end(fmt.Errorf("%w: %v", ErrRevoked, cause))
		return nil
	case c.opts.NoReconnect:
		c.end(fmt.Errorf("connection to %s lost: %w", redact.URL(c.urls[c.at]), cause))
		return nil
	}
	c.log.Warn("connection to the bus lost; reconnecting", "url", redact.URL(c.urls[c.at]), "err", cause)
	return c.reconnect()
}

// reconnect tries to establish a new session, waiting longer after each
// failure, until one succeeds or the Conn ends. With several URLs, a
// round tries each once, starting with the one after the URL that was
// lost (that node just went away; another is likelier to answer), and
// the backoff comes between rounds, so a client moves to a live node
// without waiting on the dead one.
func (c *Conn) reconnect() *session {
	attempts := 0
	for round := 0; ; round++ {
		t := time.NewTimer(c.backoff(round))
		select {
		case <-c.ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		for range c.urls {
			c.at = (c.at + 1) % len(c.urls)
			attempts++
			ctx, cancel := context.WithTimeout(c.ctx, c.opts.CallTimeout)
			s, err := c.establish(ctx, c.urls[c.at])
			cancel()
			if err == nil {
				c.log.Info("reconnected to the bus", "url", redact.URL(c.urls[c.at]), "attempts", attempts)
				return s
			}
			if c.ctx.Err() != nil {
				return nil
			}
			if credentialRefused(err) && !c.opts.RetryUnauthorized {
				c.log.Error("the bus refused the credential; not reconnecting (fix the token, or set RetryUnauthorized to keep trying)", "url", redact.URL(c.urls[c.at]), "err", err)
				c.end(fmt.Errorf("%w at %s: %w", ErrRefused, redact.URL(c.urls[c.at]), err))
				return nil
			}
			c.log.Info("reconnect failed", "url", redact.URL(c.urls[c.at]), "attempt", attempts, "err", err)
		}
	}
}

// backoff returns the wait before reconnect round n (from 0): doubling
// from ReconnectMin up to ReconnectMax, of which a random half, so that
// peers that lost the bus together do not all return at the same instant.
func (c *Conn) backoff(n int) time.Duration {
	return backoff.Jitter(backoff.Exponential(c.opts.ReconnectMin, c.opts.ReconnectMax, n))
}
