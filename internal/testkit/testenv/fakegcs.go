package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FakeGCS returns the endpoint (http://127.0.0.1:port) of a
// fake-gcs-server, a Google Cloud Storage JSON API emulator, that this
// test binary starts with localstack/fake-gcs-server.sh on first use
// (building the pinned version into the cache once). Call StopFakeGCS
// when the tests end (TestMain); if the binary dies first, the script's
// watchdog stops the server. The test fails, never skips, if no server
// can be had. Buckets are the caller's to create; the server takes no
// credentials.
func FakeGCS(t testing.TB) string {
	t.Helper()
	fakeGCS.once.Do(startFakeGCS)
	if fakeGCS.err != nil {
		t.Fatalf("testenv: start fake-gcs-server: %v", fakeGCS.err)
	}
	return fakeGCS.url
}

// StopFakeGCS stops the fake-gcs-server FakeGCS started, if any.
func StopFakeGCS() error {
	s := &fakeGCS
	if s.state == "" {
		return nil
	}
	defer os.RemoveAll(s.state)
	cmd := exec.Command("bash", filepath.Join(s.root, "localstack", "fake-gcs-server.sh"), "stop")
	cmd.Env = append(os.Environ(), "DURASHUFFLE_FAKEGCS_STATE="+s.state)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("localstack/fake-gcs-server.sh stop: %w\n%s", err, out)
	}
	return nil
}

var fakeGCS struct {
	once  sync.Once
	url   string
	err   error
	root  string
	state string // the script's state dir; empty if not started
}

func startFakeGCS() {
	s := &fakeGCS
	root, err := repoRoot()
	if err != nil {
		s.err = err
		return
	}
	state, err := os.MkdirTemp("", "durashuffle-fakegcs-state-")
	if err != nil {
		s.err = err
		return
	}
	s.root, s.state = root, state
	cmd := exec.Command("bash", filepath.Join(root, "localstack", "fake-gcs-server.sh"), "start")
	cmd.Env = append(os.Environ(),
		"DURASHUFFLE_FAKEGCS_STATE="+state,
		"DURASHUFFLE_FAKEGCS_WATCH_PID="+strconv.Itoa(os.Getpid()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s.err = fmt.Errorf("localstack/fake-gcs-server.sh start: %w\n%s", err, stderr.String())
		return
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(line, "endpoint="); ok {
			s.url = strings.TrimSpace(v)
		}
	}
	if s.url == "" {
		s.err = fmt.Errorf("localstack/fake-gcs-server.sh start printed no endpoint=: %q\n%s", out, stderr.String())
	}
}
