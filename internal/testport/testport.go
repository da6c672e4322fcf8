// Package testport hands tests loopback ports for servers they start as
// processes or configure by address (a bub serve, a NATS cluster's
// routes), where binding port 0 and reading the address back is not
// possible.
//
// The ports are below Linux's ephemeral range (32768 and up): a port
// found by binding ":0" could be handed out again as the source port of
// another connection before the server binds it. A port free a moment
// ago can still be taken by another test, in this process or another
// test binary running beside it, before the server binds it: so each
// port is also claimed, for the rest of the test, by a lock on a file
// named for it that every test process of this machine shares. The lock
// goes with the process that holds it, however it ends.
package testport

import (
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

// Claim returns n distinct free loopback ports, claimed until t ends.
func Claim(t testing.TB, n int) []int {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "bub-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("testport: %v", err)
	}
	var ports []int
	for try := 0; len(ports) < n; try++ {
		if try == 1000 {
			t.Fatalf("testport: no %d free ports below 32768", n)
		}
		port := 20000 + rand.IntN(12000)
		if slices.Contains(ports, port) {
			continue
		}
		// Claimed first, probed second: a port another test holds the
		// lock of is in use or about to be, even while nothing listens.
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatalf("testport: %v", err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // another test has it
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			f.Close()
			continue
		}
		l.Close()
		t.Cleanup(func() { f.Close() })
		ports = append(ports, port)
	}
	return ports
}

// Addr is one claimed port as a loopback address, "127.0.0.1:PORT".
func Addr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(Claim(t, 1)[0])
}
