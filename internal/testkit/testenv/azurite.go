package testenv

import (
	"fmt"
	"os"
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

// azurite is the Azurite blob service localstack/azurite.sh starts (the
// pinned Azurite, installed with npm into the cache once).
var azurite = &server{name: "Azurite", script: "azurite.sh",
	stateEnv: "DURASHUFFLE_AZURITE_STATE", watchEnv: "DURASHUFFLE_AZURITE_WATCH_PID"}

var azuriteMainRunning atomic.Bool

// AzuriteMain runs the package's tests and then stops the Azurite the
// test binary started, if any. Call it from TestMain of a package whose
// tests call Azurite.
func AzuriteMain(m *testing.M) {
	azuriteMainRunning.Store(true)
	code := m.Run()
	if err := azurite.stop(); err != nil {
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
	return AzuriteEndpoint{URL: azurite.running(t) + "/" + AzuriteAccount, Account: AzuriteAccount, Key: AzuriteKey}
}
