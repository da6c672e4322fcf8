package spawner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// stateFile is the name of the spawner's store in its data directory.
const stateFile = "spawner.db"

// agentsBucket maps each topic the spawner has served to its agent id.
var agentsBucket = []byte("agents")

// state is what the spawner keeps across restarts: which agent id serves
// which topic, so a conversation whose agent hibernated gets the same id,
// and so the same retries and held messages, after the spawner is
// restarted. One bbolt file; its lock keeps a second spawner out.
type state struct {
	db *bolt.DB
}

// openState opens (creating if needed) the store in dir and returns it
// with the topics it maps, topic to agent id.
func openState(dir string) (*state, map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, stateFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, nil, fmt.Errorf("open %s: another spawner uses it (give each spawner a data dir of its own)", path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	agents := make(map[string]string)
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(agentsBucket)
		if err != nil {
			return err
		}
		return b.ForEach(func(topic, id []byte) error {
			agents[string(topic)] = string(id)
			return nil
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return &state{db: db}, agents, nil
}

// put records that id serves topic; it returns once that is on disk.
func (s *state) put(topic, id string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(agentsBucket).Put([]byte(topic), []byte(id))
	})
	if err != nil {
		return fmt.Errorf("record agent %s for %s in %s: %w", id, topic, s.db.Path(), err)
	}
	return nil
}

func (s *state) close() error { return s.db.Close() }
