package partition_test

import (
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/surface"
)

// Every exported identifier of partition is one a user needs: an example,
// the command line, examples/ or another package of the library uses it.
func TestSurfaceEveryExportedIdentifierIsUsed(t *testing.T) { surface.Check(t) }
