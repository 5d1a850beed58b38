package chunker

import (
	"math/rand/v2"
	"testing"

	"github.com/durashuffle/durashuffle/store"
)

// TestCRC32CCombine: the combined checksum of two pieces is the checksum
// of the two back to back, for empty pieces, short ones and long ones.
func TestCRC32CCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3<<20)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for _, split := range [][2]int{{0, 0}, {0, 5}, {5, 0}, {1, 1}, {7, 1000}, {1000, 7}, {65536, 1 << 20}, {1 << 20, 2<<20 - 3}, {3, 3<<20 - 3}} {
		a, b := buf[:split[0]], buf[split[0]:split[0]+split[1]]
		want := store.CRC32C(buf[:split[0]+split[1]])
		if got := crc32cCombine(store.CRC32C(a), store.CRC32C(b), int64(len(b))); got != want {
			t.Fatalf("pieces of %d and %d bytes: combined %08x, want %08x", len(a), len(b), got, want)
		}
	}
	// A running checksum over many frames, as the appender keeps one.
	var run uint32
	off := 0
	for off < len(buf) {
		n := min(int(r.Uint32N(40_000)), len(buf)-off)
		run = crc32cCombine(run, store.CRC32C(buf[off:off+n]), int64(n))
		off += n
	}
	if want := store.CRC32C(buf); run != want {
		t.Fatalf("running combined checksum %08x, want %08x", run, want)
	}
}
