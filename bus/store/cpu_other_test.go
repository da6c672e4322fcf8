//go:build !unix

package store_test

import "time"

// processCPU is not measured where getrusage does not exist.
func processCPU() time.Duration { return 0 }
