// Package telegram is the Telegram bridge: a bus peer that turns each
// Telegram chat into a bus conversation and carries the agents' replies
// back. `bub telegram` runs it.
//
// # Inbound (Telegram → bus)
//
// Updates arrive by long polling (getUpdates) or, with Options.WebhookURL,
// by webhook. Each accepted update becomes a sendMessage on tg:{chat_id}:
//
//   - message → telegram_message (text, from, chat_id, timestamp,
//     message_id, user_id, username, chat_type, reply_to_message_id,
//     message_thread_id, kind, and for media file_id and caption)
//   - edited_message → telegram_edited_message (the same fields and
//     edit_date)
//   - callback_query (a press of an inline button) → telegram_callback
//     (data, callback_query_id, the message's chat and id, the presser);
//     the press is answered at once so the button stops spinning
//
// Every other update kind (channel posts, inline queries, polls, member
// changes, reactions, business messages, payments) is dropped and counted
// in bub_telegram_updates_total{outcome="unsupported"}, as are messages with
// nothing an agent could read (service messages, locations, contacts).
//
// Messages from chats and users not on the allow-lists are dropped, logged
// and counted, never forwarded. In groups, GroupModeMention (the default)
// forwards only messages that mention the bot or reply to it.
//
// A message is forwarded until the bus accepts it (routes it, or holds
// it): while the bus is down or nobody serves tg:*, the bridge retries
// with backoff and does not advance its update offset, so the update is
// neither lost nor skipped. Once accepted, its update_id is recorded in
// the data directory (a small JSON file replaced atomically) before the
// offset moves past it, so a restart neither loses nor repeats a message.
// While the chat's agent works, the chat shows "typing…".
//
// # Outbound (bus → Telegram)
//
// The bridge subscribes outbound:* and sends plaintext_message {text} and
// telegram_reply {text, parse_mode, reply_to_message_id,
// message_thread_id, buttons} to the chat named by the topic. Long texts
// are split on paragraph, line or word boundaries; text Telegram refuses
// for its markup is sent again as plain text. Telegram's errors map onto
// the bus's delivery results: 429 asks for a retry after Telegram's
// retry_after, network errors and 5xx ask for a retry with the bus's
// backoff, and a permanent refusal (bot blocked, chat not found, bad
// payload) is answered reject, so that the bus puts the message in the
// dead-letter queue at once with the reason, and Telegram is asked once
// (see Bridge.deliver).
//
// The bot token never appears in logs or errors: Telegram puts it in
// every request's URL, so transport errors are redacted before anything
// reads them.
package telegram
