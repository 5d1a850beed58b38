package faulttest

import (
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/storesuite"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestStoreSuiteFaults runs the store suite's fault matrix on MinIO
// (over TLS, through a proxy with MinIO's certificate): each fault kind
// on the first request of every operation and 5% of the rest, and a
// rate limit; exact rows and nothing left but the stage's objects. The
// cloud stores' modules run the same matrix on their emulators.
func TestStoreSuiteFaults(t *testing.T) {
	onMinIO(t, func(t *testing.T, e testenv.Endpoint) { storesuite.Faults(t, storesuite.S3(t, e)) })
}
