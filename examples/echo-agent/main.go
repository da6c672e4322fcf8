// Command echo-agent is the smallest useful bub agent, the one the guide's
// spawner walkthrough starts: it answers every chat message with its own
// text, so you can watch a conversation go from a new chat, through
// `bub spawner`, to a freshly started agent and back.
//
// It reads its bus environment (BUB_BUS_URL, BUB_AGENT_ID,
// BUB_DEFAULT_TOPIC) with peer.DialEnv, which also subscribes
// agent:{BUB_AGENT_ID}, then subscribes its default topic (tg:123). For
// each telegram_message or plaintext_message it sends
//
//	{"type":"plaintext_message","text":"echo: <text>","chat_id":<chat_id>,"agent_id":"<its id>"}
//
// to outbound:{chat_id}, taking chat_id from the payload, else from its
// default topic tg:{chat_id}. Other payload types are left unprocessed.
//
// With ECHO_DURABLE=1 it subscribes its default topic durably
// (docs/PROTOCOL.md, "Durable subscriptions"): while it is hibernated,
// its conversation's messages are held for it and wake it through the
// spawner, its waker.
//
// A payload may carry "delay_ms" to make the agent wait that long before
// answering, as a model would: the tests use it to kill an agent while it
// holds a message.
//
// It also shows tool subscriptions (docs/PROTOCOL.md, "Tool
// subscriptions"): the text "/timer 2s 5" subscribes it to the timer tool
// (examples/timer-tool, on tool:timer) for five ticks two seconds apart,
// with its conversation (its default topic) as the thread, and "/cancel"
// cancels the thread's subscriptions. Each event reaches the agent on
// agent:{its id}, waking it if it is hibernated, and it answers
//
//	{"type":"plaintext_message","text":"event: {\"tick\":1}","chat_id":...,"agent_id":...}
//
// on outbound:{chat_id}, "event (final): ..." for the last.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// timerTopic is where the timer tool (examples/timer-tool) takes calls.
const timerTopic = "tool:timer"

// maxDelay bounds delay_ms, so that a message cannot park the agent for
// longer than the bus waits for an answer.
const maxDelay = 20 * time.Second

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log); err != nil {
		fmt.Fprintf(os.Stderr, "echo-agent: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger) error {
	env := peer.FromEnv()
	if env.DefaultTopic == "" {
		return errors.New("BUB_DEFAULT_TOPIC is not set: the agent does not know its conversation")
	}
	a := &echoAgent{id: env.AgentID, defaultTopic: env.DefaultTopic, log: log}
	conn, err := peer.DialEnv(ctx, a.handle, &peer.Options{Logger: log})
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Subscribe(ctx, env.DefaultTopic, a.handle, &peer.SubscribeOptions{Durable: os.Getenv("ECHO_DURABLE") == "1"}); err != nil {
		if ctx.Err() != nil {
			// Told to stop while it subscribed (a message on agent:{id}
			// may already have been answered): a stop, not a failure
			// for the spawner to restart.
			log.Info("echo-agent stopping")
			return nil
		}
		return err
	}
	log.Info("echo-agent ready", "agent_id", env.AgentID, "topic", env.DefaultTopic, "workspace", env.Workspace)
	select {
	case <-ctx.Done():
		log.Info("echo-agent stopping")
		return nil
	case <-conn.Done():
		return conn.Err()
	}
}

// echoAgent answers chat messages on its topics.
type echoAgent struct {
	id           string
	defaultTopic string
	log          *slog.Logger
}

// chatMessage is the part of a telegram_message or plaintext_message the
// agent reads. chat_id is kept as raw JSON, so a number stays a number in
// the reply.
type chatMessage struct {
	Text    string          `json:"text"`
	ChatID  json.RawMessage `json:"chat_id"`
	DelayMS int             `json:"delay_ms"`
}

// reply is what the agent sends to outbound:{chat_id}.
type reply struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	ChatID  json.RawMessage `json:"chat_id"`
	AgentID string          `json:"agent_id"`
}

func (a *echoAgent) handle(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
	switch d.Type() {
	case "telegram_message", "plaintext_message":
	case protocol.TypeSubscriptionEvent:
		return a.handleEvent(ctx, d)
	default:
		return peer.Result{Message: fmt.Sprintf("echo-agent does not handle %q", d.Type())}, nil
	}
	var msg chatMessage
	if err := d.Decode(&msg); err != nil {
		return peer.Result{}, err
	}
	a.log.Info("handling message", "message_id", d.MessageID, "topic", d.Topic, "attempt", d.Attempt)
	chatID, err := a.chatID(msg.ChatID)
	if err != nil {
		return peer.Result{Message: err.Error()}, nil
	}
	if delay := min(time.Duration(msg.DelayMS)*time.Millisecond, maxDelay); delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return peer.Result{}, ctx.Err()
		}
	}
	text := "echo: " + msg.Text
	if command, ok := strings.CutPrefix(msg.Text, "/"); ok {
		if text, err = a.command(ctx, d, command); err != nil {
			return peer.Result{}, err
		}
	}
	return a.reply(ctx, d, chatID, text)
}

// handleEvent answers a tool subscription's event in the conversation.
func (a *echoAgent) handleEvent(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
	ev, ok := d.SubscriptionEvent()
	if !ok {
		return peer.Result{Reject: true, Message: "not a valid subscription_event"}, nil
	}
	a.log.Info("handling tool event", "message_id", d.MessageID, "tool_call_id", ev.ToolCallID, "final", ev.Final, "attempt", d.Attempt)
	chatID, err := a.chatID(nil)
	if err != nil {
		return peer.Result{Message: err.Error()}, nil
	}
	prefix := "event: "
	if ev.Final {
		prefix = "event (final): "
	}
	return a.reply(ctx, d, chatID, prefix+ev.Text)
}

// command runs a chat command: "/timer EVERY COUNT" subscribes the
// conversation to the timer tool, "/cancel" cancels its subscriptions.
// The answer is the text to reply; an error leaves the message
// unprocessed, to be delivered again.
func (a *echoAgent) command(ctx context.Context, d *peer.Delivery, command string) (string, error) {
	fields := strings.Fields(command)
	switch {
	case len(fields) == 3 && fields[0] == "timer":
		count, err := strconv.Atoi(fields[2])
		if err != nil {
			return "usage: /timer EVERY COUNT, as /timer 2s 5", nil
		}
		sub, err := d.Conn.SubscribeTool(ctx, timerTopic, a.defaultTopic, "timer-"+d.MessageID, map[string]any{"every": fields[1], "count": count}, nil)
		if err != nil {
			return "subscribe failed: " + err.Error(), nil
		}
		return "subscribed: " + sub.Result.Text, nil
	case len(fields) == 1 && fields[0] == "cancel":
		subs, err := d.Conn.ToolSubscriptions(ctx, a.defaultTopic)
		if err != nil {
			return "", err
		}
		for _, s := range subs {
			if _, err := d.Conn.CancelToolSubscription(ctx, s.GroupID, s.ToolCallID); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("cancelled: %d subscriptions", len(subs)), nil
	}
	return "echo: /" + command, nil
}

// reply sends text to outbound:{chatID}.
func (a *echoAgent) reply(ctx context.Context, d *peer.Delivery, chatID json.RawMessage, text string) (peer.Result, error) {
	// d.Conn, not the Conn DialEnv returns: a message held for this
	// agent arrives the moment DialEnv subscribes, before it returns.
	out := reply{Type: "plaintext_message", Text: text, ChatID: chatID, AgentID: a.id}
	topic := "outbound:" + chatIDString(chatID)
	res, err := d.Conn.SendMessage(ctx, topic, out, nil)
	if err != nil {
		// Not processed: the bus delivers the message again, and the
		// reply gets another chance.
		return peer.Result{}, fmt.Errorf("reply to %s: %w", topic, err)
	}
	if res.NoSubscribers() {
		a.log.Warn("nobody took the reply", "topic", topic, "reason", res.Reason)
	}
	return peer.Result{Processed: true, Message: "echoed to " + topic}, nil
}

// chatID returns the chat to answer: the payload's chat_id, else the chat
// of the agent's default topic tg:{chat_id}.
func (a *echoAgent) chatID(fromPayload json.RawMessage) (json.RawMessage, error) {
	if s := chatIDString(fromPayload); s != "" {
		return fromPayload, nil
	}
	chat, ok := strings.CutPrefix(a.defaultTopic, "tg:")
	if !ok || chat == "" {
		return nil, fmt.Errorf("no chat_id in the payload, and default topic %q is not tg:{chat_id}", a.defaultTopic)
	}
	raw, _ := json.Marshal(chat)
	return raw, nil
}

// chatIDString returns a chat_id, a JSON string or number, as the text of
// a topic; "" when it is neither.
func chatIDString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}
