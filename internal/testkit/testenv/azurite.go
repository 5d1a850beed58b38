package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Azurite's well-known development account, which every Azurite serves;
// its key is published in Azurite's documentation and is no secret.
const (
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// AzuriteEndpoint is a running Azurite blob service: the development
// account's service URL (http://127.0.0.1:PORT/devstoreaccount1) and its
// Shared Key.
type AzuriteEndpoint struct {
	URL, Account, Key string
}

// ConnectionString is the endpoint as an Azure Storage connection string.
func (e AzuriteEndpoint) ConnectionString() string {
	return "DefaultEndpointsProtocol=http;AccountName=" + e.Account + ";AccountKey=" + e.Key + ";BlobEndpoint=" + e.URL + ";"
}

// azurite is the Azurite blob service localstack/azurite.sh starts, once
// per test binary, on first use.
var azurite struct {
	once  sync.Once
	url   string
	err   error
	root  string
	state string
}

var azuriteMainRunning atomic.Bool

// AzuriteMain runs the package's tests and then stops the Azurite the
// test binary started, if any. Call it from TestMain of a package whose
// tests call Azurite.
func AzuriteMain(m *testing.M) {
	azuriteMainRunning.Store(true)
	code := m.Run()
	if err := stopAzurite(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop Azurite: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Azurite starts Azurite's blob service on loopback on first use (installing
// the pinned Azurite with npm if it is not in the cache) and returns it. A
// test calling it fails, never skips, if Azurite cannot start.
func Azurite(t testing.TB) AzuriteEndpoint {
	t.Helper()
	if !azuriteMainRunning.Load() && !mainRunning.Load() {
		t.Fatal("testenv: Azurite runs for the whole test binary and needs testenv.Main or testenv.AzuriteMain to stop it: " +
			"add `func TestMain(m *testing.M) { testenv.AzuriteMain(m) }` to the package's tests")
	}
	azurite.once.Do(startAzuriteWithRetries)
	if azurite.err != nil {
		t.Fatalf("testenv: start Azurite: %v", azurite.err)
	}
	return AzuriteEndpoint{URL: azurite.url + "/" + AzuriteAccount, Account: AzuriteAccount, Key: AzuriteKey}
}

// startAzuriteWithRetries tries a few times: on a loaded machine a start
// can fail for passing reasons (a port taken between pick and bind).
func startAzuriteWithRetries() {
	var errs []error
	for attempt := 1; attempt <= 3; attempt++ {
		err := startAzurite()
		if err == nil {
			return
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
		if azurite.state != "" {
			os.RemoveAll(azurite.state)
			azurite.state = ""
		}
	}
	azurite.err = errors.Join(errs...)
}

func startAzurite() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "durashuffle-azurite-state-")
	if err != nil {
		return err
	}
	azurite.root, azurite.state = root, state
	cmd := exec.Command("bash", filepath.Join(root, "localstack", "azurite.sh"), "start")
	cmd.Env = append(os.Environ(),
		"DURASHUFFLE_AZURITE_STATE="+state,
		// If this binary dies without running AzuriteMain's cleanup (a
		// test timeout panics), the script's watchdog stops the server.
		"DURASHUFFLE_AZURITE_WATCH_PID="+strconv.Itoa(os.Getpid()),
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("localstack/azurite.sh start: %w\n%s", err, stderr.String())
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(line, "endpoint="); ok {
			azurite.url = strings.TrimSpace(v)
		}
	}
	if azurite.url == "" {
		return fmt.Errorf("localstack/azurite.sh start printed no endpoint=: %q\n%s", out, stderr.String())
	}
	return nil
}

func stopAzurite() error {
	if azurite.state == "" {
		return nil
	}
	defer os.RemoveAll(azurite.state)
	cmd := exec.Command("bash", filepath.Join(azurite.root, "localstack", "azurite.sh"), "stop")
	cmd.Env = append(os.Environ(), "DURASHUFFLE_AZURITE_STATE="+azurite.state)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("localstack/azurite.sh stop: %w\n%s", err, out)
	}
	return nil
}
