package testsvc

import (
	"net"
	"sync"
	"testing"
)

// Listen listens on a free port of 127.0.0.1, a server that is not one:
// each connection it takes is handed to serve on a goroutine of its own,
// and closed once serve returns (serve func(net.Conn) {} hangs up at
// once; one that reads until the client closes keeps the connection open
// and silent). It returns the address. When tb ends the listener and the
// connections still open close, and their goroutines are waited for.
func Listen(tb testing.TB, serve func(net.Conn)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					_ = c.Close()
				}()
				serve(c)
			})
		}
	})
	return ln.Addr().String()
}
