package uploader

import (
	"sync"
	"time"
)

// limiter is the pool's adaptive concurrency: an AIMD window in
// [1, max]. A throttling answer (SlowDown, 503) halves it; every
// successful part grows it by 1/window, so it regains one slot per
// window's worth of successes. Safe for concurrent use.
type limiter struct {
	mu       sync.Mutex
	cond     *sync.Cond
	window   float64
	max      int
	inUse    int
	cooldown time.Duration
	lastCut  time.Time
	now      func() time.Time
}

func newLimiter(max int, cooldown time.Duration) *limiter {
	l := &limiter{window: float64(max), max: max, cooldown: cooldown, now: time.Now}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// acquire waits for a slot under the current window.
func (l *limiter) acquire() {
	l.mu.Lock()
	for l.inUse >= int(l.window) {
		l.cond.Wait()
	}
	l.inUse++
	l.mu.Unlock()
}

// release frees a slot; ok reports a successful request.
func (l *limiter) release(ok bool) {
	l.mu.Lock()
	l.inUse--
	if ok && l.window < float64(l.max) {
		l.window = min(float64(l.max), l.window+1/l.window)
	}
	l.mu.Unlock()
	l.cond.Broadcast()
}

// throttled halves the window, at most once per cooldown: one burst of
// SlowDown answers is one signal, not many.
func (l *limiter) throttled() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.lastCut) < l.cooldown {
		return
	}
	l.lastCut = now
	l.window = max(1, l.window/2)
}

// current is the effective concurrency.
func (l *limiter) current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.window)
}
