package telegram

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// stateFile is the name of the bridge's state in its data directory.
const stateFile = "telegram-state.json"

// maxRecent bounds the update ids remembered beyond the offset. A batch of
// getUpdates holds at most 100, and webhooks deliver a few at a time, so
// a thousand covers every update that can be in flight.
const maxRecent = 1000

// state is what makes a restart neither lose nor repeat an update: the
// offset (every update up to it was accepted by the bus) and the ids of
// updates above it that were accepted too, recorded the moment the bus
// accepted each. Telegram sends an update again until getUpdates is
// called with an offset past it; on the way, the ids say which of them
// were already forwarded.
//
// It is a small JSON file, written to a temporary file, synced and
// renamed over the old one, so a crash leaves the old state or the new,
// never a torn one.
type state struct {
	mu   sync.Mutex
	path string // "" keeps the state in memory only
	data stateData
}

type stateData struct {
	// Offset is the highest update_id below which every update was
	// handled; getUpdates asks from Offset+1.
	Offset int `json:"offset"`
	// Recent are update ids above Offset that were handled.
	Recent []int `json:"recent,omitempty"`
	// Posted are the approval requests posted to the approver chat,
	// newest last, so that a decision can show on its message and a
	// reply to it can edit its summary after a restart too.
	Posted []postedApproval `json:"posted,omitempty"`
}

// postedApproval is an approval request's message in the approver chat.
type postedApproval struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	MessageID int    `json:"message_id"`
}

// maxPosted bounds the approval messages remembered: approvals expire
// within hours, and the file is rewritten on every update.
const maxPosted = 500

// openState reads dir's state, or starts an empty one if there is none.
// An empty dir keeps the state in memory (tests, and webhook mode without
// a data directory).
func openState(dir string) (*state, error) {
	s := &state{}
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("telegram: data dir: %w", err)
	}
	s.path = filepath.Join(dir, stateFile)
	raw, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("telegram: read state: %w", err)
	}
	if err := json.Unmarshal(raw, &s.data); err != nil {
		// Refuse rather than start over: starting over would forward
		// every update Telegram still keeps a second time.
		return nil, fmt.Errorf("telegram: state file %s is damaged (%v); move it away to start from Telegram's oldest pending update", s.path, err)
	}
	return s, nil
}

// offset returns the offset recorded.
func (s *state) offset() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data.Offset
}

// seen reports whether update id was handled already.
func (s *state) seen(id int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return id <= s.data.Offset || slices.Contains(s.data.Recent, id)
}

// done records that update id was handled, durably, before returning.
func (s *state) done(id int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id <= s.data.Offset || slices.Contains(s.data.Recent, id) {
		return nil
	}
	s.data.Recent = append(s.data.Recent, id)
	if len(s.data.Recent) > maxRecent {
		// The oldest ids are far below anything Telegram still sends.
		s.data.Recent = s.data.Recent[len(s.data.Recent)-maxRecent:]
	}
	return s.save()
}

// advance moves the offset to id, every update up to it being handled.
func (s *state) advance(id int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id <= s.data.Offset {
		return nil
	}
	s.data.Offset = id
	s.data.Recent = slices.DeleteFunc(s.data.Recent, func(r int) bool { return r <= id })
	return s.save()
}

// save writes the state atomically; s.mu is held.
func (s *state) save() error {
	if s.path == "" {
		return nil
	}
	raw, err := json.Marshal(s.data)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), stateFile+".*")
	if err != nil {
		return fmt.Errorf("telegram: save state: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return fmt.Errorf("telegram: save state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("telegram: save state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("telegram: save state: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("telegram: save state: %w", err)
	}
	// The rename is durable only once the directory is synced.
	if dir, err := os.Open(filepath.Dir(s.path)); err == nil {
		_ = dir.Sync()
		dir.Close()
	}
	return nil
}

// rememberApproval records the message that shows approval p, durably.
func (s *state) rememberApproval(p postedApproval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data.Posted = append(s.data.Posted, p)
	if len(s.data.Posted) > maxPosted {
		s.data.Posted = s.data.Posted[len(s.data.Posted)-maxPosted:]
	}
	return s.save()
}

// postedApproval returns the newest message that shows approval id, or
// the one with messageID when id is empty.
func (s *state) postedApproval(id string, messageID int) (postedApproval, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.data.Posted) - 1; i >= 0; i-- {
		p := s.data.Posted[i]
		if (id != "" && p.ID == id) || (id == "" && p.MessageID == messageID) {
			return p, true
		}
	}
	return postedApproval{}, false
}
