package sidecar_test

import (
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/surface"
)

// Every exported identifier of sidecar is one a user needs: an example,
// the command line, examples/ or another package of the library uses it.
// ListActions is a Flight RPC, which gRPC calls through the service's
// interface and Flight clients by its name on the wire.
func TestSurfaceEveryExportedIdentifierIsUsed(t *testing.T) {
	surface.Check(t, "Server.ListActions")
}
