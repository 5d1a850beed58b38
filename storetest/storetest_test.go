package storetest_test

import (
	"testing"

	"github.com/durashuffle/durashuffle/internal/testenv"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/storetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestEmbedded(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := testenv.Embedded(t).NewStore(t)
		return s
	})
}

// TestMinIO runs against a real MinIO (started here) or the server named
// by DURASHUFFLE_TEST_ENDPOINT (LocalStack, AWS).
func TestMinIO(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := testenv.MinIO(t).NewStore(t)
		return s
	})
}

// TestVersityGW runs against versitygw, a gateway that keeps objects as
// files, started here whether or not DURASHUFFLE_TEST_ENDPOINT is set.
func TestVersityGW(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := testenv.VersityGW(t).NewStore(t)
		return s
	})
}
