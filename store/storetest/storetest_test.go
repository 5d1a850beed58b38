package storetest_test

import (
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/storetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestContract runs the suite against every server of the end-to-end
// suites (testenv.Backends: the embedded server, a real MinIO, versitygw;
// or the server named by DURASHUFFLE_TEST_ENDPOINT), and against the
// in-memory store.Mem the sidecar's tests and benchmarks use.
func TestContract(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			s, _ := b.Start(t).NewStore(t)
			storetest.Run(t, s)
		})
	}
	t.Run("mem", func(t *testing.T) { storetest.Run(t, &store.Mem{}) })
}

// TestContractThroughRetries runs the suite on MinIO through the retry
// layer every client puts above its store: retries must not change an
// answer (a conditional put's loser stays a loser, a missing key stays
// missing, a repeated Complete stays idempotent).
func TestContractThroughRetries(t *testing.T) {
	t.Run("minio", func(t *testing.T) {
		s, _ := testenv.MinIO(t).NewStore(t)
		counter := &store.Counter{}
		storetest.Run(t, retry.Wrap(s, retry.Policy{MaxAttempts: 4, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Timeout: time.Minute}, counter))
	})
}
