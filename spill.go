package durashuffle

import (
	"os"
	"sync"

	"github.com/durashuffle/durashuffle/internal/spill"
)

// spillDir is a client's spill directory (spill on), made when the first
// writer needs it, so that a client that only reads touches no disk.
type spillDir struct {
	root  string
	limit int64

	mu  sync.Mutex
	dir *spill.Dir
}

func newSpillDir(cfg Config) *spillDir {
	if cfg.Write.Spill != "on" {
		return nil
	}
	root := cfg.Write.SpillDir
	if root == "" {
		root = os.TempDir()
	}
	// What a killed process left goes now, whether or not this one
	// ever spills.
	spill.RemoveDead(root)
	return &spillDir{root: root, limit: int64(cfg.Write.SpillBytes)}
}

// get returns the directory, opening it on first use (nil: spill off).
// An error names spill_dir; the next writer tries again.
func (s *spillDir) get() (*spill.Dir, error) {
	if s == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == nil {
		d, err := spill.Open(s.root, s.limit)
		if err != nil {
			return nil, err
		}
		s.dir = d
	}
	return s.dir, nil
}

func (s *spillDir) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir != nil {
		s.dir.Close()
	}
}
