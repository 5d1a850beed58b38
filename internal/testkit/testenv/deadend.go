package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BlackHole returns a loopback address (host:port) where a TCP connect
// never completes and is never refused: an endpoint that drops packets,
// without root or a firewall. It is a socket listening with a backlog of
// 0 that never accepts, whose queue this function fills; Linux then drops
// every further SYN (net.ipv4.tcp_abort_on_overflow 0, the default), so
// the client's connect waits for its own timeout. Closed when t ends.
func BlackHole(t testing.TB) string {
	t.Helper()
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_abort_on_overflow"); err == nil && strings.TrimSpace(string(b)) != "0" {
		t.Fatalf("testenv: BlackHole needs net.ipv4.tcp_abort_on_overflow 0 (a full queue must drop SYNs, not reset them), it is %s", b)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("testenv: black hole socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testenv: black hole bind: %v", err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatalf("testenv: black hole listen: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testenv: black hole address: %v", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the accept queue: connects succeed until it is full, then one
	// times out, which proves the hole is black.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("testenv: black hole %s: connect %d failed without timing out: %v", addr, i, err)
			}
			return addr
		}
		t.Cleanup(func() { c.Close() })
		if i == 16 {
			t.Fatalf("testenv: black hole %s still accepts after %d connects", addr, i+1)
		}
	}
}

// Stall is a loopback TCP server that accepts every connection, reads and
// discards whatever it is sent, and never answers: a server that hangs
// after the handshake. Its connections are closed when t ends.
type Stall struct {
	Addr     string // host:port
	accepted atomic.Int64
}

// Accepted is the number of connections accepted so far.
func (s *Stall) Accepted() int64 { return s.accepted.Load() }

// NewStall starts a Stall, stopped when t ends.
func NewStall(t testing.TB) *Stall {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: stall listener: %v", err)
	}
	s := &Stall{Addr: ln.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				var b [32 << 10]byte
				for {
					if _, err := c.Read(b[:]); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return s
}
