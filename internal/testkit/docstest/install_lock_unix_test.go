//go:build unix

package docstest

import (
	"os"
	"syscall"
	"testing"
)

// lockModuleCache holds an exclusive lock on path (created if need be)
// until the test ends: two test processes installing v0.0.0-test at
// once would remove each other's copy from the shared module cache. The
// kernel drops the lock if the process dies.
func lockModuleCache(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("lock %s: %v", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
}
