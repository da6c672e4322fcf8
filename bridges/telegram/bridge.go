package telegram

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mymmrac/telego"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/internal/backoff"
	urlredact "github.com/bub-bus/bub/internal/redact"
	"github.com/bub-bus/bub/peer"
)

// Group modes: which messages in a group or supergroup are forwarded.
const (
	// GroupModeMention forwards only messages that mention the bot
	// (@username) or reply to one of its messages, so an agent does not
	// read every word of a busy group.
	GroupModeMention = "mention"
	// GroupModeAll forwards every message the bot can see (with privacy
	// mode on, Telegram itself still shows a bot only some of them).
	GroupModeAll = "all"
)

// DefaultAPIURL is Telegram's Bot API server.
const DefaultAPIURL = "https://api.telegram.org"

// Options configure a Bridge. Zero values take the defaults named.
type Options struct {
	// Token is the bot's token from @BotFather (required). It is never
	// logged and never part of an error.
	Token string
	// APIURL is the Bot API server. Default: DefaultAPIURL; a local
	// telegram-bot-api server or a fake in tests otherwise.
	APIURL string
	// HTTPClient makes the Bot API calls: set it for a transport of your
	// own (a proxy, the CA of a local Bot API server's TLS). Its Timeout,
	// if any, must exceed PollTimeout. Default: a new http.Client.
	HTTPClient *http.Client

	// BusURL is the bus's WebSocket URL (required).
	BusURL string
	// BusToken is the credential presented to the bus; none for an open
	// bus.
	BusToken string
	// ClientID is the bridge's clientId on the bus. Default: "telegram".
	// The bus retries outbound deliveries to this identity, so it must
	// stay the same across restarts.
	ClientID string

	// DataDir holds the update offset and the recent update ids
	// (telegram-state.json). Default: none, which keeps them in memory
	// and so repeats or loses nothing only while the process lives.
	DataDir string
	// AllowChats and AllowUsers are the chat and user ids whose messages
	// are forwarded: a message passes if its chat is in AllowChats or its
	// sender in AllowUsers. Both empty: every chat. Default: empty.
	AllowChats []int64
	AllowUsers []int64
	// GroupMode is GroupModeMention (default) or GroupModeAll.
	GroupMode string

	// PollTimeout is the long-poll timeout of getUpdates. Default: 30s.
	PollTimeout time.Duration
	// WebhookURL switches to webhook mode: Run registers it with
	// setWebhook and updates arrive at ServeHTTP, which the caller mounts
	// at the URL's path. Default: long polling.
	WebhookURL string
	// WebhookSecret is the secret_token Telegram sends with every webhook
	// request (A-Z, a-z, 0-9, _ and -). Default: derived from Token, so
	// that it need not be configured separately.
	WebhookSecret string

	// TypingMax bounds how long a chat shows "typing…" after a message
	// when no reply comes. Default: 2 minutes.
	TypingMax time.Duration
	// typingInterval is how often the chat action is renewed: 4s, as
	// Telegram shows it for 5 seconds. retryMax caps the backoff between
	// attempts to reach the bus or Telegram: 5s. Neither is a choice for
	// users; tests shorten them (export_test.go).
	typingInterval time.Duration
	retryMax       time.Duration

	// ApproverChat, when set, is the chat where BCP approval requests
	// are posted with Approve and Reject buttons (approvals.go);
	// Approvers are the Telegram user ids whose presses count. Both or
	// neither. Default: none, and approvals are not relayed.
	ApproverChat int64
	Approvers    []int64
	// GatewayID is the BCP gateway's clientId: approval requests from
	// anyone else are not shown. Default: DefaultGatewayID.
	GatewayID string

	// Logger receives the bridge's logs. Default: slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.APIURL == "" {
		o.APIURL = DefaultAPIURL
	}
	if o.ClientID == "" {
		o.ClientID = "telegram"
	}
	if o.GroupMode == "" {
		o.GroupMode = GroupModeMention
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = 30 * time.Second
	}
	if o.WebhookSecret == "" {
		sum := sha256.Sum256([]byte("bub-telegram-webhook:" + o.Token))
		o.WebhookSecret = hex.EncodeToString(sum[:])
	}
	if o.TypingMax <= 0 {
		o.TypingMax = 2 * time.Minute
	}
	if o.typingInterval <= 0 {
		o.typingInterval = 4 * time.Second
	}
	if o.retryMax <= 0 {
		o.retryMax = 5 * time.Second
	}
	if o.GatewayID == "" {
		o.GatewayID = DefaultGatewayID
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Bridge connects one Telegram bot to the bus.
type Bridge struct {
	opts    Options
	log     *slog.Logger
	bot     *telego.Bot
	state   *state
	metrics *metrics
	typing  *typing

	allowChats map[int64]bool
	allowUsers map[int64]bool
	// approvers is Options.Approvers as a set (approvals.go).
	approvers       map[int64]bool
	approvalMetrics *approvalMetrics

	// botID and botUsername are the bot's own, from getMe; mention mode
	// needs them.
	botID       int64
	botUsername string

	// conn is the bus connection once Run has it; nil before.
	conn atomic.Pointer[peer.Conn]
	// ready is closed once Run is connected to both ends.
	ready     chan struct{}
	readyOnce sync.Once

	// mu guards the fields below.
	mu sync.Mutex
	// progress maps an outbound messageId to the pieces of its text
	// already sent, so a retry after a failure midway (429 on piece 3)
	// sends the rest rather than the whole text again.
	progress map[string]progress
	// threads remembers each chat's forum thread of its latest message,
	// so that a reply without message_thread_id lands in the thread the
	// conversation is in.
	threads map[int64]int
}

// New checks opts and returns a Bridge; Run starts it.
func New(opts *Options) (*Bridge, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Token == "" {
		return nil, ErrNoToken
	}
	if o.BusURL == "" {
		return nil, errors.New("telegram: no bus URL")
	}
	o.setDefaults()
	if (o.ApproverChat == 0) != (len(o.Approvers) == 0) {
		return nil, errors.New("telegram: approvals need both an approver chat and the approvers' user ids")
	}
	if o.GroupMode != GroupModeMention && o.GroupMode != GroupModeAll {
		return nil, fmt.Errorf("telegram: group mode %q: want %q or %q", o.GroupMode, GroupModeMention, GroupModeAll)
	}
	bot, err := telego.NewBot(o.Token,
		telego.WithAPIServer(o.APIURL),
		telego.WithAPICaller(newCaller(o.HTTPClient, o.Token)),
		// telego's own logger prints request URLs in debug mode; the
		// bridge logs what matters itself, redacted.
		telego.WithDiscardLogger(),
	)
	if errors.Is(err, telego.ErrInvalidToken) {
		return nil, errors.New("telegram: the bot token is not in @BotFather's format (digits, a colon, 35 letters, digits, _ or -)")
	}
	if err != nil {
		// telego's errors here name the problem, never the token.
		return nil, fmt.Errorf("telegram: %w", err)
	}
	st, err := openState(o.DataDir)
	if err != nil {
		return nil, err
	}
	b := &Bridge{
		opts:       o,
		log:        o.Logger,
		bot:        bot,
		state:      st,
		metrics:    newMetrics(),
		allowChats: set(o.AllowChats),
		allowUsers: set(o.AllowUsers),
		approvers:  set(o.Approvers),
		ready:      make(chan struct{}),
		progress:   map[string]progress{},
		threads:    map[int64]int{},
	}
	b.typing = newTyping(b)
	b.approvalMetrics = newApprovalMetrics(b.metrics.registry)
	return b, nil
}

// progress is how far a reply got: pieces sent, and when last touched.
type progress struct {
	sent int
	at   time.Time
}

// progressTTL bounds how long a partly sent reply is remembered. The bus
// gives up on a message within its retries (minutes at the defaults), and
// a message it dead-letters never comes back to clear its entry.
const progressTTL = time.Hour

func set(ids []int64) map[int64]bool {
	m := make(map[int64]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// Gatherer returns the bridge's metrics, for a /metrics endpoint.
func (b *Bridge) Gatherer() prometheus.Gatherer { return b.metrics.registry }

// Ready is closed once the bridge is connected to the bus and Telegram.
func (b *Bridge) Ready() <-chan struct{} { return b.ready }

// Run connects to Telegram and the bus and bridges them until ctx ends.
// It returns nil when ctx ends, or the error that stopped it (a refused
// bot token, an unusable data directory, a bus connection that ended for
// good: taken over, or its credential refused).
func (b *Bridge) Run(ctx context.Context) (err error) {
	if err := b.whoAmI(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	conn, err := b.dialBus(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	// A bus connection that ends for good ends the bridge: it can carry
	// nothing more, and a supervisor restarting it says so louder than a
	// bridge that polls Telegram for chats it cannot deliver.
	ctx, unbind := conn.Bind(ctx)
	defer unbind()
	defer func() {
		if end := conn.Err(); err == nil && end != nil {
			err = fmt.Errorf("telegram: bus connection ended: %w", end)
		}
	}()
	b.conn.Store(conn)
	if err := conn.Subscribe(ctx, "outbound:*", b.deliver, nil); err != nil {
		return fmt.Errorf("telegram: subscribe outbound:*: %w", err)
	}
	if err := b.subscribeApprovals(ctx, conn); err != nil {
		return err
	}
	defer b.typing.stopAll()
	if b.opts.WebhookURL != "" {
		if err := b.setWebhook(ctx); err != nil {
			return err
		}
		b.markReady()
		<-ctx.Done()
		return nil
	}
	return b.poll(ctx)
}

func (b *Bridge) markReady() {
	b.readyOnce.Do(func() {
		close(b.ready)
		b.log.Info("telegram bridge ready", "bot", b.botUsername, "bus", urlredact.URLs(b.opts.BusURL), "mode", b.mode(), "group_mode", b.opts.GroupMode)
	})
}

func (b *Bridge) mode() string {
	if b.opts.WebhookURL != "" {
		return "webhook"
	}
	return "polling"
}

// whoAmI learns the bot's id and username (getMe), retrying while the Bot
// API cannot be reached; a refused token ends it.
func (b *Bridge) whoAmI(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		me, err := b.bot.GetMe(ctx)
		if err == nil {
			b.botID, b.botUsername = me.ID, me.Username
			return nil
		}
		if isUnauthorized(err) {
			return ErrTokenRefused
		}
		if class, _ := classify(err); class == classPermanent {
			return fmt.Errorf("telegram: getMe: %s", describe(err))
		}
		b.log.Warn("cannot reach the Bot API; retrying", "api_url", b.opts.APIURL, "error", describe(err))
		if !sleep(ctx, retryWait(attempt, b.opts.retryMax)) {
			return nil
		}
	}
}

// dialBus connects to the bus, retrying while it is down: a bridge
// started before its bus waits for it. Once connected, the peer SDK
// reconnects by itself.
func (b *Bridge) dialBus(ctx context.Context) (*peer.Conn, error) {
	for attempt := 0; ; attempt++ {
		conn, err := peer.Dial(ctx, b.opts.BusURL, &peer.Options{
			ClientID: b.opts.ClientID,
			Token:    b.opts.BusToken,
			Logger:   b.log,
			// No HandlerTimeout of our own: the SDK's default ends a
			// send just before the bus's delivery timeout, so the bus
			// never gives up on a reply the bridge is still sending and
			// sends it twice. Pieces already sent are remembered, so
			// the retry resumes a long reply; a bus whose replies need
			// longer raises --delivery-timeout.
		})
		if err == nil {
			return conn, nil
		}
		if errors.Is(err, peer.ErrUnauthorized) {
			return nil, fmt.Errorf("telegram: bus: %w (check --token, --token-file or BUB_TOKEN)", err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		b.log.Warn("cannot reach the bus; retrying", "bus", urlredact.URLs(b.opts.BusURL), "error", err)
		if !sleep(ctx, retryWait(attempt, b.opts.retryMax)) {
			return nil, ctx.Err()
		}
	}
}

// retryWait is the wait before retry attempt+1: 100ms doubling, capped,
// with jitter so that many bridges do not hammer a bus back in step.
func retryWait(attempt int, max time.Duration) time.Duration {
	return backoff.Jitter(backoff.Exponential(100*time.Millisecond, max, attempt))
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
