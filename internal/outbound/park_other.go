//go:build !linux

package outbound

// parkState is empty where Conns do not park.
type parkState struct{}

// enablePark leaves parking off: there is no poller here, and a Conn's
// goroutine waits in Read.
func (c *Conn) enablePark() {}

// parkSocket is never called: parks is never set.
func (c *Conn) parkSocket(func()) bool { return false }

// unpark has nothing to resume.
func (c *Conn) unpark() {}

// Parked returns how many Conns of the process are parked now: none.
func Parked() int { return 0 }
