package store_test

import (
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/surface"
)

// Every exported identifier of store is one a user needs: an example,
// the command line, examples/ or another package of the library uses it.
// Unwrapper is the documented extension point of a wrapper of the
// user's own (a meter, a tracer), which As looks through; no package of
// the library needs to name it.
func TestSurfaceEveryExportedIdentifierIsUsed(t *testing.T) { surface.Check(t, "Unwrapper") }
