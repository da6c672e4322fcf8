// Package proctree reads a process's children from /proc (Linux): how
// the tests and the benchmark harness check that bub spawner never runs
// more agent processes than --max-agents.
package proctree

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Children counts the live processes whose parent is pid: zombies are
// not counted, since they have exited and only wait to be reaped. It
// returns 0 where /proc cannot be read.
func Children(pid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	parent := strconv.Itoa(pid)
	count := 0
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == parent && fields[0] != "Z" {
			count++
		}
	}
	return count
}
