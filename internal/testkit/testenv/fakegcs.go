package testenv

import "testing"

// fakeGCS is a fake-gcs-server, a Google Cloud Storage JSON API
// emulator, started by localstack/fake-gcs-server.sh (which builds the
// pinned version into the cache once).
var fakeGCS = &server{name: "fake-gcs-server", script: "fake-gcs-server.sh",
	stateEnv: "DURASHUFFLE_FAKEGCS_STATE", watchEnv: "DURASHUFFLE_FAKEGCS_WATCH_PID"}

// FakeGCS returns the endpoint (http://127.0.0.1:port) of the
// fake-gcs-server this test binary starts on first use. Call StopFakeGCS
// when the tests end (TestMain), or use Main; if the binary dies first,
// the script's watchdog stops the server. The test fails, never skips,
// if no server can be had. Buckets are the caller's to create; the
// server takes no credentials.
func FakeGCS(t testing.TB) string {
	t.Helper()
	return fakeGCS.running(t)
}

// StopFakeGCS stops the fake-gcs-server FakeGCS started, if any.
func StopFakeGCS() error { return fakeGCS.stop() }
