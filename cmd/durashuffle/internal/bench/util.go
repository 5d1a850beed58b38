package bench

import (
	"fmt"
	"os"
	"runtime/pprof"
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
