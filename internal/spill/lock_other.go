//go:build !unix

package spill

import (
	"errors"
	"os"
)

// Without flock, a directory cannot tell a live process from a dead
// one: none is ever taken for dead.
func lockDir(dir string) (*os.File, error) { return os.Open(os.DevNull) }

func tryLock(dir string) (*os.File, error) {
	return nil, errors.New("no directory locks on this system")
}
