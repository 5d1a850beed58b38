package chunker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/durashuffle/durashuffle/internal/frame"
)

// autoCodec picks the codec of each frame for compression auto: the
// cheapest codec at which the uploads, not the encoders, are the
// bottleneck. It watches, per window of autoWindow, how long the appender
// waited for a chunk buffer (the upload pool's memory bound is spent: the
// link is full) and how many bytes it appended (while the link is full,
// the upload rate), against each codec's measured encode rate per
// encoder (stored bytes per second of encoding). It steps up one codec
// (more CPU, fewer bytes) while the appender waits for buffers and the
// next codec's encoders, all of them at its measured rate, would still
// out-run the upload rate by autoMargin; it steps down while the
// appender never waits (the encoders, or the producers, are the
// bottleneck). Never below lz4: a frame that lz4 cannot shrink is stored
// uncompressed anyway (frame codec none), and on a CPU-bound writer
// uncompressed frames cost the link and TLS twice the bytes.
type autoCodec struct {
	encoders int
	window   time.Duration    // autoWindow
	now      func() time.Time // time.Now; tests step a clock of their own
	level    atomic.Int32     // index into frame.Codecs

	mu       sync.Mutex
	rate     [4]float64 // stored bytes per encode-second per encoder, EWMA; 0: not measured
	winStart time.Time
	blocked  time.Duration
	out      int64
	switches int
}

const (
	autoWindow = 250 * time.Millisecond
	autoMargin = 1.3
	autoMin    = 1 // frame.Codecs[1] is lz4
)

func newAutoCodec(encoders int) *autoCodec {
	a := &autoCodec{encoders: max(1, encoders), window: autoWindow, now: time.Now}
	a.winStart = a.now()
	a.level.Store(autoMin)
	return a
}

// codec is the codec for the next frame.
func (a *autoCodec) codec() string { return frame.Codecs[a.level.Load()] }

// encoded records one frame encoded with codec: stored bytes in d.
func (a *autoCodec) encoded(codec string, stored int, d time.Duration) {
	if d <= 0 || stored <= 0 {
		return
	}
	i := codecIndex(codec)
	r := float64(stored) / d.Seconds()
	a.mu.Lock()
	if a.rate[i] == 0 {
		a.rate[i] = r
	} else {
		a.rate[i] = 0.8*a.rate[i] + 0.2*r
	}
	a.mu.Unlock()
}

// appended records a frame of n stored bytes put into the stream after
// waiting wait for chunk buffers, and decides at the end of a window.
func (a *autoCodec) appended(n int, wait time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.blocked += wait
	a.out += int64(n)
	win := a.now().Sub(a.winStart)
	if win < a.window {
		return
	}
	blockedFrac := a.blocked.Seconds() / win.Seconds()
	outRate := float64(a.out) / win.Seconds()
	a.winStart, a.blocked, a.out = a.now(), 0, 0
	lvl := int(a.level.Load())
	switch {
	case blockedFrac > 0.3 && lvl+1 < len(frame.Codecs):
		// The link is full: spend CPU on fewer bytes if the encoders can
		// still feed it.
		if next := a.rate[lvl+1]; next == 0 || next*float64(a.encoders) >= autoMargin*outRate {
			a.level.Store(int32(lvl + 1))
			a.switches++
		}
	case blockedFrac < 0.05 && lvl > autoMin:
		// The uploads wait on the encoders: cheaper frames.
		a.level.Store(int32(lvl - 1))
		a.switches++
	}
}

func codecIndex(codec string) int {
	for i, c := range frame.Codecs {
		if c == codec {
			return i
		}
	}
	return autoMin
}
