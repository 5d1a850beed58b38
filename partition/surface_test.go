package partition_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/surface"
)

// Every exported identifier of package partition is used by one of its
// examples or by a program outside it (the library's other packages,
// the sidecar, the command line), not by tests alone.
func TestSurfaceEveryExportedIdentifierIsUsed(t *testing.T) {
	exported, interfaces := surface.Exports(t, ".")
	if len(exported) == 0 {
		t.Fatal("package partition exports nothing")
	}
	files := surface.Files(t, ".", func(path string) bool {
		return strings.HasPrefix(filepath.Base(path), "example") && strings.HasSuffix(path, "_test.go")
	})
	files = append(files, surface.Files(t, "..", func(path string) bool {
		return !strings.HasSuffix(path, "_test.go") && filepath.Dir(path) != filepath.Clean("../partition") && !strings.Contains(path, "testkit")
	})...)
	if unused := surface.Unused(files, "github.com/durashuffle/durashuffle/partition", exported, interfaces); len(unused) > 0 {
		t.Errorf("%d exported identifiers of package partition are used by no example and by no program outside it; use them there or unexport them:\n\t%s",
			len(unused), strings.Join(unused, "\n\t"))
	}
}
