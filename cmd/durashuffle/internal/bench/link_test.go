package bench

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestLinkShapes checks the link against its spec from below, which no
// load on the machine can make flaky: a small exchange costs at least the
// round trip, and a transfer at least its bytes over the bandwidth plus
// latency (added to, not hidden behind, the transfer).
// How close to the nominal rate the link gets is the probe's job in every
// bench run.
func TestLinkShapes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const body = 1 << 20
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, body)
				for {
					// 's': 1 byte back; 'U': 1 MiB follows, 1 byte back;
					// 'D': 1 MiB back.
					var op [1]byte
					if _, err := io.ReadFull(c, op[:]); err != nil {
						return
					}
					size := 1
					switch op[0] {
					case 'U':
						if _, err := io.ReadFull(c, buf[:body-1]); err != nil {
							return
						}
					case 'D':
						size = body
					}
					if _, err := c.Write(buf[:size]); err != nil {
						return
					}
				}
			}()
		}
	}()
	const latency, bw = 20 * time.Millisecond, 8 << 20
	l, err := StartLink("http://"+ln.Addr().String(), latency, bw)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	small := make([]byte, 1)
	for range 3 {
		start := time.Now()
		if _, err := c.Write([]byte{'s'}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, small); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got < latency-time.Millisecond {
			t.Fatalf("1-byte round trip took %v, the link adds %v", got, latency)
		}
	}
	// A transfer of 1 MiB costs its bytes over the bandwidth plus the
	// round trip. toxiproxy holds each chunk for its serialization time
	// and then for what is left of the direction's latency, so part of
	// the sending direction's half may overlap the transfer; the other
	// direction's half never does.
	want := latency/2 + time.Duration(float64(body)/float64(l.ConnBandwidth)*float64(time.Second))
	up := make([]byte, body)
	up[0] = 'U'
	for _, tc := range []struct {
		name string
		send []byte
		recv int
	}{{"upload", up, 1}, {"download", []byte{'D'}, body}} {
		start := time.Now()
		if _, err := c.Write(tc.send); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, tc.recv)); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got < want {
			t.Fatalf("1 MiB %s took %v, the link allows no less than %v", tc.name, got, want)
		}
	}
}
