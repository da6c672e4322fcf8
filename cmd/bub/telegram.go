package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bub-bus/bub/bridges/telegram"
	"github.com/bub-bus/bub/internal/redact"
	"github.com/bub-bus/bub/peer"
)

func init() {
	register("telegram", "bridge a Telegram bot to the bus: chats to tg:{chat_id}, replies from outbound:{chat_id}", runTelegram)
}

// botTokenEnv holds the bot's token. It is read from the environment (or
// --bot-token-file), never from a flag: a command line is visible to
// every user of the machine, and --help would print a flag's value.
const botTokenEnv = "BUB_TELEGRAM_TOKEN"

// telegramConfig is bub telegram's flags.
type telegramConfig struct {
	busURL        string
	clientID      string
	cred          credentialFlags
	botTokenFile  string
	apiURL        string
	dataDir       string
	allowChats    string
	allowUsers    string
	groupMode     string
	pollTimeout   time.Duration
	webhookURL    string
	webhookSecret string
	listen        string
	typingMax     time.Duration
	approverChat  int64
	approvers     string
	bcpGatewayID  string
	logLevel      string
	logFormat     string
}

func runTelegram(ctx context.Context, io stdio, args []string) int {
	var cfg telegramConfig
	fs := newFlagSet(io, "telegram", "telegram [flags]\n\n"+
		"Forwards each message to the bot to tg:{chat_id} as telegram_message (edits as\n"+
		"telegram_edited_message, button presses as telegram_callback), where bub spawner starts\n"+
		"an agent for the chat, and sends plaintext_message and telegram_reply payloads on\n"+
		"outbound:{chat_id} to the chat. The bot token comes from "+botTokenEnv+" or\n"+
		"--bot-token-file, never from the command line. Updates arrive by long polling, or by\n"+
		"webhook with --webhook-url (and --listen for the address Telegram's requests reach).")
	fs.StringVar(&cfg.busURL, "bus-url", peer.DefaultBusURL, busURLUsage)
	fs.StringVar(&cfg.clientID, "client-id", "telegram", "clientId of the bridge on the bus; keep it stable, the bus retries replies to it")
	cfg.cred.addFlags(fs)
	fs.StringVar(&cfg.botTokenFile, "bot-token-file", "", "file holding the bot's token from @BotFather, instead of "+botTokenEnv+"; surrounding white space is ignored")
	fs.StringVar(&cfg.apiURL, "api-url", telegram.DefaultAPIURL, "Bot API server: a local telegram-bot-api server, or a fake in tests")
	fs.StringVar(&cfg.dataDir, "data-dir", "./data/telegram", "directory for the update offset, so that a restart neither loses nor repeats a message")
	fs.StringVar(&cfg.allowChats, "allow-chats", "", "comma-separated chat ids whose messages are forwarded (a group's id is negative); with --allow-users, either admits; both empty: every chat")
	fs.StringVar(&cfg.allowUsers, "allow-users", "", "comma-separated user ids whose messages are forwarded, in any chat")
	fs.StringVar(&cfg.groupMode, "group-mode", telegram.GroupModeMention, "in groups: mention (only messages that mention the bot or reply to it) or all")
	fs.DurationVar(&cfg.pollTimeout, "poll-timeout", 30*time.Second, "long-poll timeout of getUpdates")
	fs.StringVar(&cfg.webhookURL, "webhook-url", "", "public HTTPS URL Telegram posts updates to; switches from long polling to a webhook served on --listen at the URL's path")
	fs.StringVar(&cfg.webhookSecret, "webhook-secret-file", "", "file holding the webhook's secret token (A-Z, a-z, 0-9, _, -); default: one derived from the bot token")
	fs.StringVar(&cfg.listen, "listen", "", "address for the webhook, /metrics and /healthz, e.g. 127.0.0.1:8443; required with --webhook-url")
	fs.DurationVar(&cfg.typingMax, "typing-max", 2*time.Minute, "how long a chat shows \"typing…\" after a message when no reply comes")
	fs.Int64Var(&cfg.approverChat, "approver-chat", 0, "chat id where BCP approval requests are posted with Approve / Reject buttons; needs --approvers, and the gateway's --relays naming this bridge")
	fs.StringVar(&cfg.approvers, "approvers", "", "comma-separated Telegram user ids whose presses in --approver-chat decide BCP approvals")
	fs.StringVar(&cfg.bcpGatewayID, "bcp-gateway-id", telegram.DefaultGatewayID, "clientId of the BCP gateway: approval requests from anyone else are not shown")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "text or json")
	// Every flag is a deployment's setting. Those whose BUB_<FLAG> would
	// not say whose setting it is are named for the bridge: BUB_DATA_DIR
	// and BUB_LISTEN are bub serve's.
	for _, name := range []string{"client-id", "bot-token-file", "api-url", "data-dir", "allow-chats", "allow-users", "group-mode",
		"poll-timeout", "webhook-url", "webhook-secret-file", "listen", "typing-max", "approver-chat", "approvers", "bcp-gateway-id"} {
		bindEnvAs(fs, name, "BUB_TELEGRAM_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
	}
	bindAllEnv(fs)
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usagef(io, "telegram", "unexpected argument %q", fs.Arg(0))
	}
	if err := checkBusURL(cfg.busURL); err != nil {
		return usagef(io, "telegram", "%v", err)
	}
	botToken, err := readSecret(os.Getenv(botTokenEnv), cfg.botTokenFile, botTokenEnv, "--bot-token-file")
	if err != nil {
		return usagef(io, "telegram", "%v", err)
	}
	if botToken == "" {
		return usagef(io, "telegram", "no bot token: set %s or pass --bot-token-file (create a bot and get its token from @BotFather)", botTokenEnv)
	}
	webhookSecret, err := readSecret("", cfg.webhookSecret, "", "--webhook-secret-file")
	if err != nil {
		return usagef(io, "telegram", "%v", err)
	}
	allowChats, err := parseIDs(cfg.allowChats)
	if err != nil {
		return usagef(io, "telegram", "--allow-chats: %v", err)
	}
	allowUsers, err := parseIDs(cfg.allowUsers)
	if err != nil {
		return usagef(io, "telegram", "--allow-users: %v", err)
	}
	approvers, err := parseIDs(cfg.approvers)
	if err != nil {
		return usagef(io, "telegram", "--approvers: %v", err)
	}
	if (cfg.approverChat == 0) != (len(approvers) == 0) {
		return usagef(io, "telegram", "--approver-chat and --approvers go together: the chat where approval requests are posted, and who may press the buttons")
	}
	webhookPath := ""
	if cfg.webhookURL != "" {
		u, err := url.Parse(cfg.webhookURL)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return usagef(io, "telegram", "--webhook-url %q: want an https:// URL", redact.URL(cfg.webhookURL))
		}
		if cfg.listen == "" {
			return usagef(io, "telegram", "--webhook-url needs --listen, the address Telegram's requests reach")
		}
		webhookPath = u.Path
		if webhookPath == "" {
			webhookPath = "/"
		}
	}
	busToken, err := cfg.cred.resolve()
	if err != nil {
		return usagef(io, "telegram", "%v", err)
	}
	logger, err := newLogger(io, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return usagef(io, "telegram", "%v", err)
	}
	if len(allowChats) == 0 && len(allowUsers) == 0 {
		logger.Warn("no --allow-chats or --allow-users: anyone who finds the bot can talk to your agents")
	}
	b, err := telegram.New(&telegram.Options{
		Token:         botToken,
		APIURL:        cfg.apiURL,
		BusURL:        cfg.busURL,
		BusToken:      busToken,
		ClientID:      cfg.clientID,
		DataDir:       cfg.dataDir,
		AllowChats:    allowChats,
		AllowUsers:    allowUsers,
		GroupMode:     cfg.groupMode,
		PollTimeout:   cfg.pollTimeout,
		WebhookURL:    cfg.webhookURL,
		WebhookSecret: webhookSecret,
		TypingMax:     cfg.typingMax,
		ApproverChat:  cfg.approverChat,
		Approvers:     approvers,
		GatewayID:     cfg.bcpGatewayID,
		Logger:        logger,
	})
	if err != nil {
		return errorf(io, "%v", err)
	}
	var srv *http.Server
	if cfg.listen != "" {
		ln, err := net.Listen("tcp", cfg.listen)
		if err != nil {
			return errorf(io, "--listen: %v", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(b.Gatherer(), promhttp.HandlerOpts{}))
		health := func(w http.ResponseWriter, _ *http.Request) {
			select {
			case <-b.Ready():
				fmt.Fprintln(w, "ok")
			default:
				http.Error(w, "not connected yet", http.StatusServiceUnavailable)
			}
		}
		mux.HandleFunc("GET /healthz", health)
		mux.HandleFunc("GET /readyz", health)
		if webhookPath != "" {
			mux.Handle(webhookPath, b)
		}
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		logger.Info("telegram bridge listening", "addr", ln.Addr().String(), "webhook_path", webhookPath)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	var runErr error
	select {
	case runErr = <-done:
	case <-ctx.Done():
	}
	// The webhook stops taking updates before the bridge lets go of the
	// bus, so none is half handled.
	if srv != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = srv.Shutdown(shutdownCtx)
		cancel()
	}
	stopRun()
	if runErr == nil {
		runErr = <-done
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return errorf(io, "%v", runErr)
	}
	logger.Info("telegram bridge stopped")
	return 0
}

// readSecret returns value, else the trimmed contents of file. Errors
// name the variable or file, never the contents.
func readSecret(value, file, envName, flagName string) (string, error) {
	if value != "" && file != "" {
		return "", fmt.Errorf("give %s or %s, not both", envName, flagName)
	}
	if file == "" {
		return strings.TrimSpace(value), nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	secret := strings.TrimSpace(string(data))
	if secret == "" {
		return "", fmt.Errorf("%s %s is empty", flagName, file)
	}
	return secret, nil
}

// parseIDs parses a comma-separated list of Telegram ids.
func parseIDs(s string) ([]int64, error) {
	var ids []int64
	for _, item := range splitList(s) {
		id, err := strconv.ParseInt(item, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a numeric id", item)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
