package telegram

import (
	"context"
	"sync"
	"time"

	"github.com/mymmrac/telego"
)

// typing shows "typing…" in chats whose agent is working: from the moment
// a message is forwarded until the reply is sent, or Options.TypingMax.
// Telegram shows a chat action for 5 seconds, so it is renewed.
type typing struct {
	b  *Bridge
	wg sync.WaitGroup

	mu    sync.Mutex
	chats map[int64]*typingChat
}

type typingChat struct {
	deadline time.Time
	stop     chan struct{}
}

func newTyping(b *Bridge) *typing { return &typing{b: b, chats: map[int64]*typingChat{}} }

// start shows typing in chat, or extends it there.
func (t *typing) start(chat int64, thread int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	deadline := time.Now().Add(t.b.opts.TypingMax)
	if c, ok := t.chats[chat]; ok {
		c.deadline = deadline
		return
	}
	c := &typingChat{deadline: deadline, stop: make(chan struct{})}
	t.chats[chat] = c
	t.wg.Go(func() { t.loop(chat, thread, c) })
}

func (t *typing) loop(chat int64, thread int, c *typingChat) {
	tick := time.NewTicker(t.b.opts.typingInterval)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), t.b.opts.typingInterval)
		err := t.b.bot.SendChatAction(ctx, &telego.SendChatActionParams{
			ChatID: telego.ChatID{ID: chat}, MessageThreadID: thread, Action: telego.ChatActionTyping,
		})
		cancel()
		if err != nil {
			// Cosmetic: a chat that misses its "typing…" loses nothing.
			t.b.log.Debug("sendChatAction failed", "chat_id", chat, "error", describe(err))
		}
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		t.mu.Lock()
		expired := time.Now().After(c.deadline)
		if expired && t.chats[chat] == c {
			delete(t.chats, chat)
		}
		t.mu.Unlock()
		if expired {
			return
		}
	}
}

// stop ends typing in chat: its reply is there.
func (t *typing) stop(chat int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.chats[chat]; ok {
		close(c.stop)
		delete(t.chats, chat)
	}
}

// stopAll ends typing everywhere and waits for the loops to finish.
func (t *typing) stopAll() {
	t.mu.Lock()
	for chat, c := range t.chats {
		close(c.stop)
		delete(t.chats, chat)
	}
	t.mu.Unlock()
	t.wg.Wait()
}
