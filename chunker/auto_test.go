package chunker

import (
	"testing"
	"time"
)

// TestAutoCodecSteps drives the codec picker through windows: while the
// appender waits for chunk buffers (the link is full) it steps up to
// zstd, one codec per window, unless the next codec's measured encoders
// could not feed the upload rate; while it never waits it steps back down,
// never below lz4.
//
// The windows run on a clock of the test's own, so a busy machine that
// oversleeps cannot dilute a window's waiting fraction.
func TestAutoCodecSteps(t *testing.T) {
	clock := time.Unix(0, 0)
	newAuto := func() *autoCodec {
		a := newAutoCodec(2)
		a.now = func() time.Time { return clock }
		a.winStart = clock
		return a
	}
	window := func(a *autoCodec, bytes int, waitFrac float64) {
		clock = clock.Add(a.window)
		a.appended(bytes, time.Duration(waitFrac*float64(a.window)))
	}
	t.Run("link full", func(t *testing.T) {
		a := newAuto()
		if a.codec() != "lz4" {
			t.Fatalf("starts at %s, want lz4", a.codec())
		}
		window(a, 1<<20, 0.8)
		if a.codec() != "zstd-fastest" {
			t.Fatalf("after a window waiting for buffers: %s, want zstd-fastest", a.codec())
		}
		window(a, 1<<20, 0.8)
		if a.codec() != "zstd" {
			t.Fatalf("after two: %s, want zstd", a.codec())
		}
		window(a, 1<<20, 0.8)
		if a.codec() != "zstd" {
			t.Fatalf("past the last codec: %s", a.codec())
		}
		for range 4 {
			window(a, 1<<20, 0)
		}
		if a.codec() != "lz4" {
			t.Fatalf("after windows of never waiting: %s, want lz4", a.codec())
		}
	})
	t.Run("encoders too slow for the next codec", func(t *testing.T) {
		a := newAuto()
		// zstd-fastest measured at 1 MB/s per encoder: 2 MB/s, far below
		// the ~100 MB/s the link takes.
		a.encoded("zstd-fastest", 1e6, time.Second)
		window(a, 100<<20, 0.8)
		if a.codec() != "lz4" {
			t.Fatalf("stepped up to %s with encoders too slow to feed the link", a.codec())
		}
	})
}
