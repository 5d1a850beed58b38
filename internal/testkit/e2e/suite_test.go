package e2e_test

import (
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/storesuite"
)

// TestStoreSuite runs the store suite's end-to-end cases on every S3
// backend: a stage written with spill on and off read back in every
// order; abort, racing attempts, seal, and input refused naming the
// limit; request and response bodies that stall are cut by
// first_byte_timeout and retried. The cloud stores' modules run the same cases on their
// emulators.
func TestStoreSuite(t *testing.T) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			tg := storesuite.S3(t, b.Start(t))
			t.Run("roundtrip", func(t *testing.T) { storesuite.RoundTrip(t, tg) })
			t.Run("lifecycle", func(t *testing.T) { storesuite.Lifecycle(t, tg) })
			t.Run("stalls", func(t *testing.T) { storesuite.Stalls(t, tg) })
		})
	}
}
