package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockFileName is the file in StoreDir a running node holds locked.
const lockFileName = "bub.lock"

// lockStoreDir takes an exclusive lock on dir, creating it if missing,
// and returns the file holding it; closing the file releases the lock,
// as the process's exit does. A second node started on the same
// directory (a typo, a copied command) would otherwise run a second
// JetStream over the first one's files and damage them: the embedded
// server keeps no lock of its own.
func lockStoreDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create JetStream store %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock JetStream store %s: %w", dir, err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("JetStream store %s: %w", dir, err)
	}
	return f, nil
}
