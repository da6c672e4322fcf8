package telegram

import (
	"context"
	"fmt"
	"sync"

	"github.com/mymmrac/telego"
)

// poll fetches updates with getUpdates until ctx ends. Each batch is
// handled in full (every update forwarded or dropped, and recorded)
// before the next getUpdates asks past it: asking with a higher offset is
// what tells Telegram to forget the batch, so nothing is confirmed before
// the bus has it.
func (b *Bridge) poll(ctx context.Context) error {
	// getUpdates answers 409 while a webhook is set, e.g. by an earlier
	// run in webhook mode. Pending updates are kept.
	for attempt := 0; ; attempt++ {
		err := b.bot.DeleteWebhook(ctx, &telego.DeleteWebhookParams{})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if isUnauthorized(err) {
			return ErrTokenRefused
		}
		b.log.Warn("deleteWebhook failed; retrying", "error", describe(err))
		if !sleep(ctx, retryWait(attempt, b.opts.retryMax)) {
			return nil
		}
	}
	b.markReady()
	timeout := int(b.opts.PollTimeout.Seconds())
	for attempt := 0; ctx.Err() == nil; {
		updates, err := b.bot.GetUpdates(ctx, &telego.GetUpdatesParams{
			Offset:  b.state.offset() + 1,
			Timeout: timeout,
			Limit:   100,
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if isUnauthorized(err) {
				return ErrTokenRefused
			}
			b.log.Warn("getUpdates failed; retrying", "error", describe(err))
			if !sleep(ctx, retryWait(attempt, b.opts.retryMax)) {
				return nil
			}
			attempt++
			continue
		}
		attempt = 0
		if err := b.handleBatch(ctx, updates); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// handleBatch handles a batch of updates: one goroutine per chat, so a
// slow agent in one chat does not hold up the others, and in order within
// a chat, so a conversation reads as it was written. Once every update is
// handled, the offset moves past the batch.
func (b *Bridge) handleBatch(ctx context.Context, updates []telego.Update) error {
	if len(updates) == 0 {
		return nil
	}
	var order []int64
	byChat := map[int64][]*telego.Update{}
	last := 0
	for i := range updates {
		u := &updates[i]
		chat := chatOf(u)
		if _, ok := byChat[chat]; !ok {
			order = append(order, chat)
		}
		byChat[chat] = append(byChat[chat], u)
		last = max(last, u.UpdateID)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(order))
	for i, chat := range order {
		wg.Go(func() {
			for _, u := range byChat[chat] {
				if err := b.handle(ctx, u, false); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("telegram: %w", err)
		}
	}
	return b.state.advance(last)
}

// chatOf is the chat an update belongs to, 0 when none.
func chatOf(u *telego.Update) int64 {
	switch {
	case u.Message != nil:
		return u.Message.Chat.ID
	case u.EditedMessage != nil:
		return u.EditedMessage.Chat.ID
	case u.CallbackQuery != nil && u.CallbackQuery.Message != nil:
		return u.CallbackQuery.Message.GetChat().ID
	}
	return 0
}
