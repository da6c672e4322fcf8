package bcp

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Role is an agent's side of a BCP channel.
type Role string

// The two roles. The Controller always asks; the Reader only answers and
// publishes against subscriptions the Controller declared.
const (
	Controller Role = "controller"
	Reader     Role = "reader"
)

// Definition is an agent definition: a Markdown file whose YAML front
// matter declares the agent and whose body is its instructions.
type Definition struct {
	Name          string         `json:"name"`
	Description   string         `json:"description,omitempty"`
	Model         string         `json:"model,omitempty"`
	Tools         []string       `json:"tools,omitempty"`
	Network       string         `json:"network,omitempty"`
	BaseTaint     Taint          `json:"base_taint,omitempty"` // 0 when not declared
	Channels      []Channel      `json:"bcp_channels,omitempty"`
	CronSchedules []CronSchedule `json:"cron_schedules,omitempty"`
	// Instructions is the Markdown body after the front matter.
	Instructions string `json:"-"`
	// File is the path the definition was read from, for error messages.
	File string `json:"-"`

	root *node // the decoded front matter, to find lines for later errors
}

// Channel is one BCP channel of an agent, to a peer agent.
type Channel struct {
	Peer        string   `json:"peer"`
	Role        Role     `json:"role"`
	MaxCategory Category `json:"max_category"`
	BudgetBits  Bits     `json:"budget_bits"`
	// MaxCat2Queries and MaxCat3Queries are 0 when not declared: only the
	// bit budget limits those categories then.
	MaxCat2Queries int `json:"max_cat2_queries,omitempty"`
	MaxCat3Queries int `json:"max_cat3_queries,omitempty"`
	// AnomalyPolicy is the channel's anomaly policy (an extension of the
	// spec; "" flags).
	AnomalyPolicy AnomalyPolicy `json:"anomaly_policy,omitempty"`
	// Subscriptions are declared on controller channels only.
	Subscriptions []Subscription `json:"subscriptions,omitempty"`
}

// Subscription is a spec a Reader may publish against, declared by the
// Controller. Its id is unique within its channel.
type Subscription struct {
	ID   string `json:"id"`
	Spec *Spec  `json:"spec"`
	// MaxPushesPerHour caps the publishes a gateway accepts in any
	// sliding hour, so that a Reader cannot flood its Controller with
	// pushes that each pass validation; 0 means no cap.
	MaxPushesPerHour int `json:"max_pushes_per_hour,omitempty"`
}

// CronSchedule is a cron line that prompts the agent with a message.
type CronSchedule struct {
	Schedule string `json:"schedule"`
	Message  string `json:"message"`
}

// Budget returns a fresh account with the channel's limits.
func (c *Channel) Budget() *Budget {
	return NewBudget(BudgetLimits{
		MaxCategory:    c.MaxCategory,
		Bits:           c.BudgetBits,
		MaxCat2Queries: c.MaxCat2Queries,
		MaxCat3Queries: c.MaxCat3Queries,
	})
}

// ValidateOptions returns the options that apply the channel's policy.
func (c *Channel) ValidateOptions() ValidateOptions {
	return ValidateOptions{Anomalies: c.AnomalyPolicy}
}

// Channel returns the agent's channel to peer in role, or nil.
func (d *Definition) Channel(peer string, role Role) *Channel {
	for i := range d.Channels {
		if d.Channels[i].Peer == peer && d.Channels[i].Role == role {
			return &d.Channels[i]
		}
	}
	return nil
}

// ParseDefinition decodes and checks one definition. file names it in
// errors. The error, if any, is an [Errors] listing every problem of the
// file; checks that need the other agents are [CheckDefinitions]'s.
func ParseDefinition(file string, data []byte) (*Definition, error) {
	def, errs := parseDefinition(file, data)
	if len(errs) > 0 {
		return nil, errs
	}
	return def, nil
}

// LoadDefinitions reads every *.md file of dir (not recursively) as a
// definition and checks them together. A file that cannot be read stops
// the load with a wrapped I/O error; otherwise the error, if any, is an
// [Errors] listing every problem in every file, sorted by file and line.
func LoadDefinitions(dir string) ([]*Definition, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read definitions %s: %w", dir, err)
	}
	var defs []*Definition
	var errs Errors
	for _, entry := range entries {
		if entry.IsDir() || !strings.HasSuffix(entry.Name(), ".md") {
			continue
		}
		path := filepath.Join(dir, entry.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read definition %s: %w", path, err)
		}
		def, fileErrs := parseDefinition(path, data)
		errs = append(errs, fileErrs...)
		if def != nil && def.Name != "" {
			// Checked together even when broken, so its peers do not
			// report it as missing.
			defs = append(defs, def)
		}
	}
	errs = append(errs, crossCheck(defs)...)
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *Error) int {
			if c := strings.Compare(a.File, b.File); c != 0 {
				return c
			}
			return a.Line - b.Line
		})
		return nil, errs
	}
	return defs, nil
}

// CheckDefinitions checks a set of definitions, each on its own and
// together: names unique, every channel matched by the peer's channel back
// in the other role, subscriptions within both channels' max_category.
func CheckDefinitions(defs []*Definition) error {
	var errs Errors
	for i, d := range defs {
		if d == nil {
			errs = append(errs, newError(CodeInvalidValue, indexPath("definitions", i), "nil definition"))
			continue
		}
		errs = append(errs, d.check()...)
	}
	defs = slices.DeleteFunc(slices.Clone(defs), func(d *Definition) bool { return d == nil })
	errs = append(errs, crossCheck(defs)...)
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// parseDefinition returns what it could decode along with every error.
func parseDefinition(file string, data []byte) (*Definition, Errors) {
	located := func(e *Error) Errors {
		e.File = file
		return Errors{e}
	}
	if !utf8.Valid(data) {
		return nil, located(newError(CodeSyntax, "", "the file is not valid UTF-8"))
	}
	front, body, err := splitFrontMatter(data)
	if err != nil {
		return nil, located(err)
	}
	root, err := parseYAML(front, 1)
	if err != nil {
		return nil, located(err)
	}
	var dec decoder
	def := dec.definition(root)
	def.File, def.Instructions, def.root = file, body, root
	errs := Errors(dec.errs)
	if len(errs) == 0 {
		errs = def.check()
	}
	for _, e := range errs {
		e.File = file
	}
	return def, errs
}

var topKeys = []string{"name", "description", "model", "tools", "network", "base_taint", "bcp_channels", "cron_schedules"}

func (dec *decoder) definition(root *node) *Definition {
	def := &Definition{}
	if !dec.object(root, "", topKeys...) {
		return def
	}
	if v := dec.require(root, "", "name"); v != nil {
		def.Name = dec.str(v, "name")
	}
	for _, key := range []string{"description", "model", "network"} {
		if v := root.get(key); v != nil {
			s := dec.str(v, key)
			switch key {
			case "description":
				def.Description = s
			case "model":
				def.Model = s
			default:
				def.Network = s
			}
		}
	}
	if v := root.get("tools"); v != nil {
		def.Tools = dec.tools(v, "tools")
	}
	if v := root.get("base_taint"); v != nil {
		if t, err := ParseTaint(dec.str(v, "base_taint")); err == nil {
			def.BaseTaint = t
		} else if v.kind == kindString {
			dec.fail(v, CodeInvalidValue, "base_taint", "base_taint must be low, medium or high")
		}
	}
	if v := root.get("bcp_channels"); v != nil {
		for i, item := range dec.list(v, "bcp_channels") {
			def.Channels = append(def.Channels, dec.channel(item, indexPath("bcp_channels", i)))
		}
	}
	if v := root.get("cron_schedules"); v != nil {
		for i, item := range dec.list(v, "cron_schedules") {
			p := indexPath("cron_schedules", i)
			var c CronSchedule
			if dec.object(item, p, "schedule", "message") {
				if s := dec.require(item, p, "schedule"); s != nil {
					c.Schedule = dec.str(s, joinPath(p, "schedule"))
				}
				if m := dec.require(item, p, "message"); m != nil {
					c.Message = dec.str(m, joinPath(p, "message"))
				}
			}
			def.CronSchedules = append(def.CronSchedules, c)
		}
	}
	return def
}

// tools accepts the spec's comma-separated string ("Read, Write") or a
// YAML list.
func (dec *decoder) tools(n *node, path string) []string {
	var tools []string
	if n.kind == kindString {
		for _, t := range strings.Split(n.text, ",") {
			tools = append(tools, strings.TrimSpace(t))
		}
		return tools
	}
	for i, item := range dec.list(n, path) {
		tools = append(tools, strings.TrimSpace(dec.str(item, indexPath(path, i))))
	}
	return tools
}

func (dec *decoder) channel(n *node, path string) Channel {
	var c Channel
	if !dec.object(n, path, "peer", "role", "max_category", "budget_bits", "max_cat2_queries", "max_cat3_queries", "anomaly_policy", "subscriptions") {
		return c
	}
	if v := dec.require(n, path, "peer"); v != nil {
		c.Peer = dec.str(v, joinPath(path, "peer"))
	}
	if v := dec.require(n, path, "role"); v != nil {
		c.Role = Role(dec.str(v, joinPath(path, "role")))
	}
	if v := dec.require(n, path, "max_category"); v != nil {
		c.MaxCategory = Category(dec.count(v, joinPath(path, "max_category")))
	}
	if v := dec.require(n, path, "budget_bits"); v != nil {
		c.BudgetBits = dec.bits(v, joinPath(path, "budget_bits"))
	}
	for _, key := range []string{"max_cat2_queries", "max_cat3_queries"} {
		if v := n.get(key); v != nil {
			p := joinPath(path, key)
			limit := dec.count(v, p)
			if limit <= 0 && v.kind == kindNumber && isIntegerLiteral(v.text) {
				// 0 in the struct means "not declared"; a declared limit
				// of zero is what max_category is for.
				dec.fail(v, CodeInvalidValue, p, "%s must be positive; lower max_category to forbid the category", key)
			}
			if key == "max_cat2_queries" {
				c.MaxCat2Queries = limit
			} else {
				c.MaxCat3Queries = limit
			}
		}
	}
	if v := n.get("anomaly_policy"); v != nil {
		c.AnomalyPolicy = AnomalyPolicy(dec.str(v, joinPath(path, "anomaly_policy")))
	}
	if v := n.get("subscriptions"); v != nil {
		for i, item := range dec.list(v, joinPath(path, "subscriptions")) {
			p := indexPath(joinPath(path, "subscriptions"), i)
			var sub Subscription
			if item.kind == kindObject {
				if id := dec.require(item, p, "id"); id != nil {
					sub.ID = dec.str(id, joinPath(p, "id"))
				}
			}
			if item.kind == kindObject {
				if v := item.get("max_pushes_per_hour"); v != nil {
					mp := joinPath(p, "max_pushes_per_hour")
					sub.MaxPushesPerHour = dec.count(v, mp)
					if sub.MaxPushesPerHour <= 0 && v.kind == kindNumber && isIntegerLiteral(v.text) {
						dec.fail(v, CodeInvalidValue, mp, "max_pushes_per_hour must be positive; remove the subscription to forbid pushes")
					}
				}
			}
			sub.Spec = dec.spec(item, p, "id", "max_pushes_per_hour")
			c.Subscriptions = append(c.Subscriptions, sub)
		}
	}
	return c
}

// bits decodes a finite number of bits; YAML may write it as an integer or
// a float.
func (dec *decoder) bits(n *node, path string) Bits {
	if n.kind != kindNumber {
		dec.fail(n, CodeWrongType, path, "must be a number, not %s", n.kind)
		return 0
	}
	f, err := strconv.ParseFloat(n.text, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		dec.fail(n, CodeWrongType, path, "must be a finite number, not %s", truncate(n.text, 24))
		return 0
	}
	return Bits(f)
}

var (
	agentNamePattern      = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	subscriptionIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
)

// check applies the rules that need only this definition.
func (d *Definition) check() Errors {
	var errs Errors
	fail := func(code Code, path, format string, args ...any) {
		e := newError(code, path, fmt.Sprintf(format, args...))
		e.File = d.File
		if d.root != nil {
			e.Line = d.root.lineAt(path)
		}
		errs = append(errs, e)
	}
	if !agentNamePattern.MatchString(d.Name) || len(d.Name) > maxNameLen {
		fail(CodeInvalidValue, "name", "name %q must be lowercase letters, digits, '_' or '-', starting with a letter or digit, at most %d characters", truncate(d.Name, maxNameLen), maxNameLen)
	}
	seenTools := map[string]bool{}
	for i, t := range d.Tools {
		switch {
		case t == "":
			fail(CodeInvalidValue, indexPath("tools", i), "tool names must not be empty")
		case seenTools[t]:
			fail(CodeDuplicate, indexPath("tools", i), "tool %q is listed twice", truncate(t, maxNameLen))
		}
		seenTools[t] = true
	}
	for i, c := range d.CronSchedules {
		p := indexPath("cron_schedules", i)
		if len(strings.Fields(c.Schedule)) != 5 {
			fail(CodeInvalidValue, joinPath(p, "schedule"), "a schedule must have five cron fields, not %q", truncate(c.Schedule, maxNameLen))
		}
		if strings.TrimSpace(c.Message) == "" {
			fail(CodeInvalidValue, joinPath(p, "message"), "message must not be empty")
		}
	}
	type channelKey struct {
		peer string
		role Role
	}
	seenChannels := map[channelKey]int{}
	for i := range d.Channels {
		c := &d.Channels[i]
		p := indexPath("bcp_channels", i)
		switch {
		case !agentNamePattern.MatchString(c.Peer):
			fail(CodeInvalidValue, joinPath(p, "peer"), "peer %q is not an agent name", truncate(c.Peer, maxNameLen))
		case c.Peer == d.Name:
			fail(CodeInvalidValue, joinPath(p, "peer"), "an agent cannot have a channel to itself")
		}
		if c.Role != Controller && c.Role != Reader {
			fail(CodeInvalidValue, joinPath(p, "role"), "role must be controller or reader, not %q", truncate(string(c.Role), maxNameLen))
		}
		key := channelKey{c.Peer, c.Role}
		if j, dup := seenChannels[key]; dup {
			fail(CodeDuplicate, p, "a second %s channel to %q (the first is bcp_channels[%d])", c.Role, c.Peer, j)
		} else {
			seenChannels[key] = i
		}
		if c.MaxCategory < Structured || c.MaxCategory > Summary {
			fail(CodeBadCategory, joinPath(p, "max_category"), "max_category must be 1, 2 or 3, not %d", c.MaxCategory)
		}
		if !(c.BudgetBits > 0) {
			fail(CodeInvalidValue, joinPath(p, "budget_bits"), "budget_bits must be positive")
		}
		if c.MaxCat2Queries < 0 || c.MaxCat3Queries < 0 {
			fail(CodeInvalidValue, p, "query limits must be positive")
		}
		if c.AnomalyPolicy != "" && c.AnomalyPolicy != FlagAnomalies && c.AnomalyPolicy != RejectAnomalies {
			fail(CodeInvalidValue, joinPath(p, "anomaly_policy"), "anomaly_policy must be flag or reject, not %q", truncate(string(c.AnomalyPolicy), maxNameLen))
		}
		if len(c.Subscriptions) > 0 && c.Role != Controller {
			fail(CodeInvalidValue, joinPath(p, "subscriptions"), "only a controller channel may declare subscriptions")
		}
		seenIDs := map[string]int{}
		for j := range c.Subscriptions {
			s := &c.Subscriptions[j]
			sp := indexPath(joinPath(p, "subscriptions"), j)
			if !subscriptionIDPattern.MatchString(s.ID) || len(s.ID) > maxNameLen {
				fail(CodeInvalidValue, joinPath(sp, "id"), "subscription id %q must match [a-z0-9][a-z0-9-]*, at most %d characters", truncate(s.ID, maxNameLen), maxNameLen)
			} else if k, dup := seenIDs[s.ID]; dup {
				fail(CodeDuplicate, joinPath(sp, "id"), "subscription id %q repeats subscriptions[%d]", s.ID, k)
			} else {
				seenIDs[s.ID] = j
			}
			if s.Spec == nil {
				fail(CodeMissingKey, sp, "no spec")
				continue
			}
			if s.Spec.Category > c.MaxCategory && c.MaxCategory >= Structured {
				fail(CodeCategoryAboveMax, joinPath(sp, "category"), "category %d is above the channel's max_category %d", s.Spec.Category, c.MaxCategory)
			}
			for _, e := range s.Spec.check(sp) {
				fail(e.Code, e.Path, "%s", e.Detail)
			}
		}
	}
	return errs
}

// crossCheck applies the rules that span definitions.
func crossCheck(defs []*Definition) Errors {
	var errs Errors
	fail := func(d *Definition, code Code, path, format string, args ...any) {
		e := newError(code, path, fmt.Sprintf(format, args...))
		e.File = d.File
		if d.root != nil {
			e.Line = d.root.lineAt(path)
		}
		errs = append(errs, e)
	}
	byName := map[string]*Definition{}
	for _, d := range defs {
		if first, dup := byName[d.Name]; dup {
			where := first.File
			if where == "" {
				where = "another definition"
			}
			fail(d, CodeDuplicate, "name", "agent %q is already defined in %s", d.Name, where)
			continue
		}
		byName[d.Name] = d
	}
	for _, d := range defs {
		if byName[d.Name] != d {
			continue // a duplicate, reported above
		}
		for i := range d.Channels {
			c := &d.Channels[i]
			p := indexPath("bcp_channels", i)
			if c.Role != Controller && c.Role != Reader {
				continue
			}
			peer := byName[c.Peer]
			if peer == nil {
				fail(d, CodeNoPeerChannel, joinPath(p, "peer"), "no agent named %q", truncate(c.Peer, maxNameLen))
				continue
			}
			back := peer.Channel(d.Name, opposite(c.Role))
			if back == nil {
				fail(d, CodeNoPeerChannel, joinPath(p, "peer"), "agent %q has no %s channel back to %q", c.Peer, opposite(c.Role), d.Name)
				continue
			}
			for j, s := range c.Subscriptions {
				if s.Spec != nil && s.Spec.Category > back.MaxCategory && back.MaxCategory >= Structured {
					sp := indexPath(joinPath(p, "subscriptions"), j)
					fail(d, CodeCategoryAboveMax, joinPath(sp, "category"), "category %d is above the max_category %d of %q's reader channel", s.Spec.Category, back.MaxCategory, c.Peer)
				}
			}
		}
	}
	return errs
}

func opposite(r Role) Role {
	if r == Controller {
		return Reader
	}
	return Controller
}
