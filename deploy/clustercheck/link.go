package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/bub-bus/bub/peer"
)

// link keeps one peer.Conn to the cluster alive. The Conn reconnects by
// itself when its connection closes, but it has no keepalive of its own:
// a connection to a node cut off by a partition can stay open and
// silent. The link pings through the Conn, and after a few unanswered
// pings dials a fresh Conn, starting at another node; the same clientId
// takes over the old connection wherever it still is.
type link struct {
	name  string
	urls  []string
	first int // index in urls of the node to dial first
	opts  peer.Options
	setup func(context.Context, *peer.Conn) error // e.g. subscribe; nil for none
	log   *slog.Logger

	mu    sync.Mutex
	conn  *peer.Conn
	dials int // Dial calls made, the first included
}

// redials counts the fresh Conns the keepalive dialed.
func (l *link) redials() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dials - 1
}

// Bounds of the keepalive: a ping every pingEvery, each given pingWait;
// a Conn whose pings time out maxSilent times in a row is replaced.
const (
	pingEvery = time.Second
	pingWait  = 2 * time.Second
	maxSilent = 3
)

// start dials the first Conn and keeps the link up until ctx ends.
func (l *link) start(ctx context.Context) error {
	c, err := l.dial(ctx)
	if err != nil {
		return err
	}
	l.conn = c
	go l.watch(ctx)
	return nil
}

// get returns the current Conn.
func (l *link) get() *peer.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn
}

// close closes the current Conn.
func (l *link) close() {
	if c := l.get(); c != nil {
		_ = c.Close()
	}
}

// dial connects, trying the nodes from the one after the last tried,
// until a Conn is up and set up or ctx ends.
func (l *link) dial(ctx context.Context) (*peer.Conn, error) {
	for {
		l.mu.Lock()
		from := (l.first + l.dials) % len(l.urls)
		l.dials++
		l.mu.Unlock()
		order := append(append([]string{}, l.urls[from:]...), l.urls[:from]...)
		c, err := peer.Dial(ctx, strings.Join(order, ","), &l.opts)
		if err == nil && l.setup != nil {
			if err = l.setup(ctx, c); err != nil {
				_ = c.Close()
			}
		}
		if err == nil {
			return c, nil
		}
		l.log.Info("dial failed; trying again", "link", l.name, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: dial: %w", l.name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// watch pings the current Conn and replaces it when it ended for good
// (taken over) or stopped answering.
func (l *link) watch(ctx context.Context) {
	silent := 0
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c := l.get()
		pctx, cancel := context.WithTimeout(ctx, pingWait)
		_, err := c.Ping(pctx)
		cancel()
		switch {
		case err == nil:
			silent = 0
			continue
		case errors.Is(err, peer.ErrDisconnected):
			// The Conn knows it lost its node and is reconnecting.
			silent = 0
			continue
		}
		select {
		case <-c.Done():
		default:
			if silent++; silent < maxSilent {
				continue
			}
		}
		l.log.Warn("connection silent or ended; dialing a fresh one", "link", l.name, "err", err)
		go func() { _ = c.Close() }() // it may be stuck on a dead socket
		fresh, err := l.dial(ctx)
		if err != nil {
			return
		}
		l.mu.Lock()
		l.conn = fresh
		l.mu.Unlock()
		silent = 0
	}
}
