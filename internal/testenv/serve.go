package testenv

import (
	"net"
	"testing"
)

// Serve accepts connections on l until t ends (l is closed then), running handle on each
// in a goroutine of its own and closing the connection when handle returns; a nil handle
// closes each connection at once (a server that only completes the handshake).
func Serve(t testing.TB, l net.Listener, handle func(net.Conn)) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if handle == nil {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}
