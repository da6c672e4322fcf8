package a2a

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// Push notifications (docs/A2A.md, "Push notifications") go out through
// the bus's signed outbound webhooks rather than a delivery loop of the
// A2A server's own: each config is a webhook subscription (webhook.add,
// made as the agent's identity) of a push topic of its own,
// a2a-push:{hook name}, and the server publishes each event of the task
// on it, in order. A topic per config, not per task: subscriptions of
// one pattern replace each other in the bus's chain (last match wins). The bus then signs, retries,
// dead-letters and journals each POST as it does every webhook's, and
// applies its address policy to the URL.

// pushPrefix begins a task's push topic.
const pushPrefix = "a2a-push:"

// TypePush is the type of the bus message the server publishes on a
// task's push topic: {"type":"a2a_push","taskId":...,"seq":N,
// "streamResponse":{...}}. The webhook POSTs streamResponse alone.
const TypePush = "a2a_push"

// pushField is the payload's field a config's webhook POSTs.
const pushField = "streamResponse"

// pushPayload is a TypePush message.
type pushPayload struct {
	Type           string          `json:"type"`
	TaskID         spec.TaskID     `json:"taskId"`
	Seq            uint64          `json:"seq"`
	StreamResponse json.RawMessage `json:"streamResponse"`
}

// pushTopic is the push topic of the config whose webhook subscription
// is hook.
func pushTopic(hook string) string { return pushPrefix + hook }

// hookName is the webhook subscription of config configID of task id:
// a digest, since config ids are the client's and webhook names are
// letters, digits, '-' and '_'.
func hookName(id spec.TaskID, configID string) string {
	sum := sha256.Sum256([]byte(string(id) + "\x00" + configID))
	return "a2a-" + hex.EncodeToString(sum[:20])
}

// maxPushConfigs bounds a task's configs: each is a subscription in the
// bus's router.
const maxPushConfigs = 16

// pushers tracks the tasks whose events go to their push topic, and
// the one goroutine per task that publishes them. A Server without
// (nil) serves no push notifications: a cluster's.
type pushers struct {
	store pushStore
	mu    sync.Mutex
	tasks map[spec.TaskID]*pusher
}

// errPushNotServed answers the push methods, and a SendMessage with a
// push config, on a server without pushers (§3.3.2's
// PushNotificationNotSupportedError).
func (s *Server) errPushNotServed() error {
	if s.push != nil {
		return nil
	}
	return errorf(CodePushNotSupported, "push notifications are not served on a cluster (the card says capabilities.pushNotifications false): the bus keeps no webhook subscriptions there; poll GetTask or follow SubscribeToTask instead")
}

// pusher is one task's publishing state: running while a goroutine
// publishes its events, again when an event came meanwhile.
type pusher struct {
	running, again bool
}

// checkPushConfig checks a config as a caller gave it, naming the field
// at fault under where.
func checkPushConfig(pc *spec.PushConfig, where string) error {
	u, err := url.Parse(pc.URL)
	switch {
	case pc.URL == "":
		return errorf(CodeInvalidParams, "%s.url is missing", where)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return errorf(CodeInvalidParams, "%s.url %q: want an http:// or https:// URL", where, pc.URL)
	case u.User != nil:
		return errorf(CodeInvalidParams, "%s.url: no user:password in the URL; give them in %s.authentication", where, where)
	case pc.Auth != nil && strings.TrimSpace(pc.Auth.Scheme) == "":
		return errorf(CodeInvalidParams, "%s.authentication.scheme is missing (Bearer, Basic, ...)", where)
	case len(pc.ID) > 256:
		return errorf(CodeInvalidParams, "%s.id is over 256 bytes", where)
	}
	return nil
}

// addPush makes config pc of task id, which agent a serves: the
// webhook subscription that delivers it, then the record. A config with
// the id of one the task has replaces it. It returns the config as
// stored. The task need not exist yet: a SendMessage makes its config
// before the task.
func (s *Server) addPush(ctx context.Context, a *agent, id spec.TaskID, pc *spec.PushConfig, where string) (*spec.PushConfig, error) {
	if err := checkPushConfig(pc, where); err != nil {
		return nil, err
	}
	cfg := *pc
	cfg.TaskID = id
	if cfg.ID == "" {
		cfg.ID = spec.NewMessageID()
	}
	name := hookName(id, cfg.ID)
	secret := cfg.Token
	if secret == "" {
		// Signed still, with a key the receiver cannot know: a config
		// without a token cannot verify Bub-Signature (docs/A2A.md).
		secret = rand.Text()
	}
	// The token is the signature's key and never travels: sent beside
	// the signature (as a2a-go's sender sends it, in
	// A2A-Notification-Token), whoever reads one request could sign
	// the next.
	headers := map[string]string{"Content-Type": "application/a2a+json"}
	if cfg.Auth != nil {
		headers["Authorization"] = strings.TrimSpace(cfg.Auth.Scheme + " " + cfg.Auth.Credentials)
	}
	// A config replaced keeps its name: the old subscription goes first.
	old, err := s.push.store.getPush(id)
	if err != nil {
		return nil, err
	}
	replacing := old != nil && slices.ContainsFunc(old.Configs, func(c *storedPushConfig) bool { return c.Hook == name })
	if replacing {
		if err := s.removeHook(ctx, a.conn, name); err != nil {
			return nil, err
		}
	} else if old != nil && len(old.Configs) >= maxPushConfigs {
		return nil, errorf(CodeInvalidParams, "task %s has %d push notification configs, the most it may have; delete one first", id, maxPushConfigs)
	}
	params := protocol.WebhookAddParams{
		Name: name, URL: cfg.URL, Pattern: pushTopic(name),
		Secret: secret, PayloadField: pushField, Headers: headers,
	}
	if err := a.conn.Call(ctx, protocol.MethodWebhookAdd, params, nil); err != nil {
		if replacing {
			// The old subscription is gone; so is the config.
			if ferr := s.forgetPush(id, name); ferr != nil {
				s.log.Error("a2a: forget a replaced push notification config", "task", id, "config", cfg.ID, "err", ferr)
			}
		}
		var perr *protocol.Error
		if errors.As(err, &perr) && perr.Code == protocol.CodeInvalidParams {
			return nil, errorf(CodeInvalidParams, "%s: the bus refused the webhook subscription that would deliver it: %s", where, perr.Message)
		}
		return nil, fmt.Errorf("make the webhook subscription of push notification config %q of task %s on the bus as %q (it needs admin): %w", cfg.ID, id, a.ClientID, err)
	}
	err = s.push.store.updatePush(id, func(pr *pushRecord, seq uint64) error {
		pr.Agent = a.Name
		pr.Configs = slices.DeleteFunc(pr.Configs, func(c *storedPushConfig) bool { return c.Hook == name })
		// It gets the events from now on; a SendMessage's config, made
		// before its task, gets them all.
		pr.Configs = append(pr.Configs, &storedPushConfig{Config: cfg, Hook: name, Pushed: seq})
		return nil
	})
	if err != nil {
		s.dropHooks(a.conn, []string{name})
		return nil, err
	}
	s.push.mu.Lock()
	if s.push.tasks[id] == nil {
		s.push.tasks[id] = &pusher{}
	}
	s.push.mu.Unlock()
	s.kickPush(id)
	return &cfg, nil
}

// removeHook removes the webhook subscription name; one the bus does
// not have is removed already.
func (s *Server) removeHook(ctx context.Context, conn *peer.Conn, name string) error {
	err := conn.Call(ctx, protocol.MethodWebhookRemove, protocol.WebhookRemoveParams{Name: name}, nil)
	var perr *protocol.Error
	if errors.As(err, &perr) && strings.Contains(perr.Message, "no webhook subscription") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove webhook subscription %s from the bus as %q: %w", name, conn.ClientID(), err)
	}
	return nil
}

// dropHooks removes webhook subscriptions in the background of a
// request that failed, or a sweep; one it cannot remove is logged with
// the command that does.
func (s *Server) dropHooks(conn *peer.Conn, names []string) {
	for _, name := range names {
		if err := s.removeHook(s.ctx, conn, name); err != nil {
			s.log.Error("a2a: a push notification's webhook subscription is left on the bus; remove it with bub webhook remove", "webhook", name, "err", err)
		}
	}
}

// dropPush deletes every config of task id, the task a SendMessage
// would have made had it not failed or been a retry.
func (s *Server) dropPush(a *agent, id spec.TaskID) {
	var names []string
	err := s.push.store.updatePush(id, func(pr *pushRecord, _ uint64) error {
		for _, c := range pr.Configs {
			names = append(names, c.Hook)
		}
		pr.Configs = nil
		return nil
	})
	if err != nil {
		s.log.Error("a2a: delete push notification configs", "task", id, "err", err)
	}
	s.dropHooks(a.conn, names)
	s.kickPush(id) // its loop finds no configs and forgets the task
}

// pushConfigOf returns the push config a SendMessage carries, or nil.
func pushConfigOf(p *spec.SendMessageRequest) *spec.PushConfig {
	if p.Config == nil {
		return nil
	}
	return p.Config.PushConfig
}

// pushMethod answers the four push notification config methods, or
// PushNotificationNotSupportedError where push is not served.
func (s *Server) pushMethod(c *call) (any, error) {
	if err := s.errPushNotServed(); err != nil {
		return nil, err
	}
	switch c.req.Method {
	case methodCreatePushConfig:
		return s.createPushConfig(c)
	case methodGetPushConfig:
		return s.getPushConfig(c)
	case methodListPushConfigs:
		return s.listPushConfigs(c)
	default:
		return s.deletePushConfig(c)
	}
}

// createPushConfig answers CreateTaskPushNotificationConfig.
func (s *Server) createPushConfig(c *call) (any, error) {
	var p spec.PushConfig
	if err := decodeParams(c.req.Params, &p); err != nil {
		return nil, err
	}
	if p.TaskID == "" {
		return nil, errorf(CodeInvalidParams, "params.taskId is missing")
	}
	if _, err := s.lookup(c, p.TaskID); err != nil {
		return nil, err
	}
	return s.addPush(c.r.Context(), c.agent, p.TaskID, &p, "params")
}

// taskPush returns the push record of a task the caller has, nil for
// none.
func (s *Server) taskPush(c *call, id spec.TaskID) (*pushRecord, error) {
	if id == "" {
		return nil, errorf(CodeInvalidParams, "params.taskId is missing")
	}
	if _, err := s.lookup(c, id); err != nil {
		return nil, err
	}
	return s.push.store.getPush(id)
}

// getPushConfig answers GetTaskPushNotificationConfig.
func (s *Server) getPushConfig(c *call) (any, error) {
	var p spec.GetTaskPushConfigRequest
	if err := decodeParams(c.req.Params, &p); err != nil {
		return nil, err
	}
	if p.ID == "" {
		return nil, errorf(CodeInvalidParams, "params.id is missing")
	}
	pr, err := s.taskPush(c, p.TaskID)
	if err != nil {
		return nil, err
	}
	if pr != nil {
		for _, sc := range pr.Configs {
			if sc.Config.ID == p.ID {
				return &sc.Config, nil
			}
		}
	}
	return nil, errorf(CodeTaskNotFound, "task %s has no push notification config %q", p.TaskID, p.ID)
}

// listPushConfigs answers ListTaskPushNotificationConfigs: every config
// of the task, on one page (at most maxPushConfigs of them).
func (s *Server) listPushConfigs(c *call) (any, error) {
	var p spec.ListTaskPushConfigRequest
	if err := decodeParams(c.req.Params, &p); err != nil {
		return nil, err
	}
	if p.PageSize < 0 {
		return nil, errorf(CodeInvalidParams, "params.pageSize %d is negative", p.PageSize)
	}
	pr, err := s.taskPush(c, p.TaskID)
	if err != nil {
		return nil, err
	}
	out := &spec.ListTaskPushConfigResponse{Configs: []*spec.PushConfig{}}
	if pr != nil {
		for _, sc := range pr.Configs {
			out.Configs = append(out.Configs, &sc.Config)
		}
	}
	return out, nil
}

// deletePushConfig answers DeleteTaskPushNotificationConfig: no
// notification goes to the config once it answers. Deleting a config
// the task does not have succeeds, as §3.1.10 asks.
func (s *Server) deletePushConfig(c *call) (any, error) {
	var p spec.DeleteTaskPushConfigRequest
	if err := decodeParams(c.req.Params, &p); err != nil {
		return nil, err
	}
	if p.ID == "" {
		return nil, errorf(CodeInvalidParams, "params.id is missing")
	}
	if _, err := s.taskPush(c, p.TaskID); err != nil {
		return nil, err
	}
	name := hookName(p.TaskID, p.ID)
	if err := s.removeHook(c.r.Context(), c.agent.conn, name); err != nil {
		return nil, err
	}
	if err := s.forgetPush(p.TaskID, name); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// forgetPush deletes the config of task id whose subscription is hook
// from the store, once the subscription is gone.
func (s *Server) forgetPush(id spec.TaskID, hook string) error {
	return s.push.store.updatePush(id, func(pr *pushRecord, _ uint64) error {
		pr.Configs = slices.DeleteFunc(pr.Configs, func(sc *storedPushConfig) bool { return sc.Hook == hook })
		return nil
	})
}

// kickPush starts publishing task id's new events on its push topic,
// if it has configs and no goroutine does so already.
func (s *Server) kickPush(id spec.TaskID) {
	if s.push == nil {
		return
	}
	s.push.mu.Lock()
	p := s.push.tasks[id]
	start := p != nil && !p.running
	switch {
	case start:
		p.running = true
	case p != nil:
		p.again = true
	}
	s.push.mu.Unlock()
	if start {
		s.wg.Add(1)
		go s.pushLoop(id, p)
	}
}

// pushLoop publishes task id's events until none is left, backing off
// while the bus cannot be reached.
func (s *Server) pushLoop(id spec.TaskID, p *pusher) {
	defer s.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		s.push.mu.Lock()
		p.again = false
		s.push.mu.Unlock()
		gone, err := s.pushPending(id)
		if err != nil {
			s.log.Warn("a2a: push notifications of a task wait for the bus", "task", id, "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-s.ctx.Done():
				t.Stop()
				s.push.mu.Lock()
				p.running = false
				s.push.mu.Unlock()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		s.push.mu.Lock()
		if !p.again {
			p.running = false
			if gone && s.push.tasks[id] == p {
				// No configs left: the task's events need no loop,
				// until addPush makes the entry again.
				delete(s.push.tasks, id)
			}
			s.push.mu.Unlock()
			return
		}
		s.push.mu.Unlock()
	}
}

// pushPending publishes task id's events, for each config, after the
// config's Pushed, in order, and moves Pushed past each; gone reports a
// task without configs. An error is the bus out of reach; an event the
// bus refuses is logged and skipped, since it would refuse it again.
func (s *Server) pushPending(id spec.TaskID) (gone bool, err error) {
	pr, err := s.push.store.getPush(id)
	if err != nil || pr == nil {
		return pr == nil && err == nil, err
	}
	a := s.agents[pr.Agent]
	if a == nil {
		return false, nil // the agent is no longer served; sweepPush ends it
	}
	from := slices.MinFunc(pr.Configs, func(x, y *storedPushConfig) int { return cmp.Compare(x.Pushed, y.Pushed) }).Pushed
	evs, err := s.store.events(id, from)
	if err != nil {
		return false, err
	}
	for _, sc := range pr.Configs {
		for _, ev := range evs {
			if ev.Seq <= sc.Pushed {
				continue
			}
			if err := s.pushEvent(a, id, sc.Hook, ev); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// pushEvent publishes ev of task id on the push topic of the config
// whose subscription is hook, and records it published.
func (s *Server) pushEvent(a *agent, id spec.TaskID, hook string, ev storedEvent) error {
	payload := &pushPayload{Type: TypePush, TaskID: id, Seq: ev.Seq, StreamResponse: ev.Data}
	_, err := a.conn.SendMessage(s.ctx, pushTopic(hook), payload, nil)
	if err != nil && !errors.As(err, new(*protocol.Error)) && !errors.Is(err, peer.ErrMessageTooBig) {
		return err
	}
	if err != nil {
		s.log.Error("a2a: the bus refused a push notification; it is not sent", "task", id, "seq", ev.Seq, "webhook", hook, "err", err)
	}
	return s.push.store.updatePush(id, func(pr *pushRecord, _ uint64) error {
		for _, sc := range pr.Configs {
			if sc.Hook == hook {
				sc.Pushed = max(sc.Pushed, ev.Seq)
			}
		}
		return nil
	})
}

// startPush loads the tasks that have configs and publishes what a
// stop left unpublished.
func (s *Server) startPush() error {
	if s.push == nil {
		return nil
	}
	ids, err := s.push.store.openPush()
	if err != nil {
		return err
	}
	s.push.mu.Lock()
	for _, id := range ids {
		if s.push.tasks[id] == nil {
			s.push.tasks[id] = &pusher{}
		}
	}
	s.push.mu.Unlock()
	for _, id := range ids {
		s.kickPush(id)
	}
	return nil
}

// sweepPush deletes the configs of the tasks the retention window
// deleted, and their webhook subscriptions: configs go with their task.
func (s *Server) sweepPush() {
	if s.push == nil {
		return
	}
	// A record younger than the retention window (a minute at most)
	// may be a SendMessage's, made just before its task.
	orphans, err := s.push.store.orphanPush(time.Now().Add(-min(time.Minute, s.opts.Retention)))
	if err != nil {
		s.log.Error("a2a: sweep push notification configs", "err", err)
		return
	}
	for id, pr := range orphans {
		a := s.agents[pr.Agent]
		if a == nil {
			a = s.agents[s.opts.Agents[0].Name]
		}
		s.dropPush(a, id)
	}
}
