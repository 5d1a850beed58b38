package uploader

import (
	"testing"
	"time"
)

func TestLimiterAIMD(t *testing.T) {
	now := time.Unix(0, 0)
	l := newLimiter(8, time.Second)
	l.now = func() time.Time { return now }
	steps := []struct {
		name string
		do   func()
		want int
	}{
		{"starts at max", func() {}, 8},
		{"throttle halves", l.throttled, 4},
		{"burst within cooldown is one signal", l.throttled, 4},
		{"after cooldown halves again", func() { now = now.Add(2 * time.Second); l.throttled() }, 2},
		{"floor is 1", func() {
			for range 5 {
				now = now.Add(2 * time.Second)
				l.throttled()
			}
		}, 1},
		{"one success at window 1 adds one", func() { l.acquire(); l.release(true) }, 2},
		{"a failure adds nothing", func() { l.acquire(); l.release(false) }, 2},
		{"about a window of successes adds one", func() {
			for range 3 { // 2 + 1/2 + 1/2.5 + 1/2.9

				l.acquire()
				l.release(true)
			}
		}, 3},
		{"capped at max", func() {
			for range 200 {
				l.acquire()
				l.release(true)
			}
		}, 8},
	}
	for _, s := range steps {
		s.do()
		if got := l.current(); got != s.want {
			t.Fatalf("%s: concurrency %d, want %d", s.name, got, s.want)
		}
	}
}

func TestLimiterBlocksAboveWindow(t *testing.T) {
	l := newLimiter(2, 0)
	l.throttled() // window 1
	l.acquire()
	got := make(chan struct{})
	go func() { l.acquire(); close(got) }()
	select {
	case <-got:
		t.Fatal("second acquire passed a window of 1")
	case <-time.After(50 * time.Millisecond):
	}
	l.release(true)
	<-got
}
