package telegram

import (
	"context"
	"net/http"
	"strings"

	ta "github.com/mymmrac/telego/telegoapi"
)

// redactingCaller is telego's net/http caller with the bot token cut out
// of every error. The token is part of each request's URL
// (/bot<token>/method), and net/http quotes the URL in its errors
// ("Post \"https://api.telegram.org/bot123:ABC/getUpdates\": ..."), so
// without this a network failure would print the secret into the logs.
type redactingCaller struct {
	inner ta.HTTPCaller
	token string
}

var _ ta.Caller = redactingCaller{}

func (c redactingCaller) Call(ctx context.Context, url string, data *ta.RequestData) (*ta.Response, error) {
	resp, err := c.inner.Call(ctx, url, data)
	if err != nil {
		return nil, &transportError{msg: redact(err.Error(), c.token), ctx: ctx.Err()}
	}
	return resp, nil
}

// redact replaces the token in s.
func redact(s, token string) string {
	if token == "" {
		return s
	}
	return strings.ReplaceAll(s, token, "<bot-token>")
}

func newCaller(client *http.Client, token string) redactingCaller {
	if client == nil {
		client = &http.Client{}
	}
	return redactingCaller{inner: ta.HTTPCaller{Client: client}, token: token}
}
