//go:build !unix

package docstest

import "testing"

// lockModuleCache: without flock, concurrent runs of the install test
// are not kept apart.
func lockModuleCache(t *testing.T, path string) {}
