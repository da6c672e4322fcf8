package a2a

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	bolt "go.etcd.io/bbolt"
)

// pushStore keeps tasks' push notification configs and how far each
// has been published. Only boltStore implements it: on a cluster push
// is not served (the bus keeps no webhook subscriptions there, and the
// JetStream store no configs), so it is not part of taskStore.
type pushStore interface {
	openPush() ([]spec.TaskID, error)
	getPush(id spec.TaskID) (*pushRecord, error)
	updatePush(id spec.TaskID, fn func(pr *pushRecord, seq uint64) error) error
	orphanPush(cutoff time.Time) (map[spec.TaskID]*pushRecord, error)
}

var _ pushStore = (*boltStore)(nil)

// bucketPush maps a task id to its pushRecord, for the tasks that have
// push notification configs. It lives in the task store's file, beside
// the tasks, and goes with its task (sweepPush).
var bucketPush = []byte("push")

// pushRecord is a task's push notification configs.
type pushRecord struct {
	// Agent is the task's agent, whose bus connection publishes.
	Agent string `json:"agent"`
	// Configs are the task's configs, in the order they were made.
	Configs []*storedPushConfig `json:"configs"`
	// Made is when the record was made: a SendMessage makes it just
	// before the task it is for, and sweepPush leaves a young record
	// without its task alone.
	Made time.Time `json:"made"`
}

// storedPushConfig is one config as the caller gave it, the name of
// the bus's webhook subscription that delivers it, and how far the
// task's events have been published for it.
type storedPushConfig struct {
	Config spec.PushConfig `json:"config"`
	Hook   string          `json:"hook"`
	// Pushed is the sequence number of the newest event published on
	// the config's push topic: events after it are still to go.
	Pushed uint64 `json:"pushed"`
}

// openPush makes the push bucket, if the store does not have it yet, and
// returns the ids of the tasks that have configs.
func (s *boltStore) openPush() ([]spec.TaskID, error) {
	var ids []spec.TaskID
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketPush)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, _ []byte) error {
			ids = append(ids, spec.TaskID(k))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("open the push configs of the task store: %w", err)
	}
	return ids, nil
}

// getPushTx returns task id's push record, nil for none.
func getPushTx(tx *bolt.Tx, id spec.TaskID) (*pushRecord, error) {
	raw := tx.Bucket(bucketPush).Get([]byte(id))
	if raw == nil {
		return nil, nil
	}
	var pr pushRecord
	if err := json.Unmarshal(raw, &pr); err != nil {
		return nil, fmt.Errorf("decode the push configs of task %s: %w", id, err)
	}
	return &pr, nil
}

// getPush returns task id's push record, nil for none.
func (s *boltStore) getPush(id spec.TaskID) (pr *pushRecord, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		pr, err = getPushTx(tx, id)
		return err
	})
	return pr, err
}

// updatePush changes task id's push record under the store's write
// lock: fn gets the record (a new one when there is none) and the
// sequence number of the task's newest event (0 for a task not made
// yet), and changes the record; a record left without configs is
// deleted. fn's error is returned as it is and changes nothing.
func (s *boltStore) updatePush(id spec.TaskID, fn func(pr *pushRecord, seq uint64) error) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		pr, err := getPushTx(tx, id)
		if err != nil {
			return err
		}
		if pr == nil {
			pr = &pushRecord{Made: time.Now()}
		}
		var seq uint64
		if rec, err := getTx(tx, id); err == nil {
			seq = rec.Seq
		} else if !errors.Is(err, errNoTask) {
			return err
		}
		if err := fn(pr, seq); err != nil {
			return err
		}
		if len(pr.Configs) == 0 {
			return tx.Bucket(bucketPush).Delete([]byte(id))
		}
		raw, err := json.Marshal(pr)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketPush).Put([]byte(id), raw)
	})
}

// orphanPush returns the push records made before cutoff whose task the
// store no longer holds (the retention window deleted it), by task id.
func (s *boltStore) orphanPush(cutoff time.Time) (map[spec.TaskID]*pushRecord, error) {
	out := map[spec.TaskID]*pushRecord{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPush).ForEach(func(k, _ []byte) error {
			if tx.Bucket(bucketTasks).Get(k) != nil {
				return nil
			}
			pr, err := getPushTx(tx, spec.TaskID(k))
			if err != nil {
				return err
			}
			if pr.Made.Before(cutoff) {
				out[spec.TaskID(k)] = pr
			}
			return nil
		})
	})
	return out, err
}
