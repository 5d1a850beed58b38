package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"
)

// StartCPUProfile writes this process's CPU profile to path until stop
// is called; with path empty it does nothing.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// peakHeapInterval is how often StartPeakHeapProfile looks at the heap.
const peakHeapInterval = 50 * time.Millisecond

// StartPeakHeapProfile samples the live heap every peakHeapInterval and,
// each time it is a fiftieth above its highest so far, takes a heap
// profile (in memory); stop writes the last one taken to path. The
// profile is the runtime's as of the collection before that moment, so it
// shows what was live near the peak, by allocation site. No-op for an
// empty path.
func StartPeakHeapProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	var last bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(peakHeapInterval)
		defer t.Stop()
		var top uint64
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > top+top/50 {
				top = ms.HeapAlloc
				last.Reset()
				_ = pprof.Lookup("heap").WriteTo(&last, 0)
			}
		}
	}()
	return func() error {
		close(done)
		wg.Wait()
		if last.Len() == 0 { // a job shorter than one look
			_ = pprof.Lookup("heap").WriteTo(&last, 0)
		}
		_, err := f.Write(last.Bytes())
		return errors.Join(err, f.Close())
	}, nil
}

func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// sizeString formats a byte count with binary units.
func sizeString(n int64) string {
	switch {
	case n >= 1e6 && n%(1<<20) != 0 && n%1e6 == 0:
		return fmt.Sprintf("%dMB", n/1e6)
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.2fGiB", float64(n)/(1<<30))
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
