package durashuffle_test

import (
	"bytes"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/surface"
)

// The root package is what a user needs, and all of it: every exported
// identifier is used by an example, the command line, examples/ or
// another package of the library (the sidecar, the embedded server), the
// programs that use the library as an outside one would. Config's groups
// hold the keys of the file, the environment and the flags, which the
// command line binds by reflection, through their names.
func TestSurfaceEveryExportedIdentifierIsUsed(t *testing.T) {
	var reached []string
	ct := reflect.TypeFor[durashuffle.Config]()
	for i := range ct.NumField() {
		g := ct.Field(i)
		reached = append(reached, "Config."+g.Name)
		for j := range g.Type.NumField() {
			reached = append(reached, g.Type.Name()+"."+g.Type.Field(j).Name)
		}
	}
	surface.Check(t, reached...)
}

// go doc of the root package fits on one screen and starts with what the
// package is for: a user reads what they need there, and all of it.
func TestSurfaceGoDocFitsOneScreen(t *testing.T) {
	out, err := exec.Command("go", "doc", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go doc .: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	const maxLines = 48
	if len(lines) > maxLines {
		t.Errorf("go doc . prints %d lines, want at most %d:\n%s", len(lines), maxLines, out)
	}
	if len(lines) < 3 || !strings.HasPrefix(lines[2], "Package durashuffle is durable shuffle storage") {
		t.Errorf("go doc . does not start with the package's summary:\n%s", out)
	}
	for _, internal := range []string{"internal/", "chunker.", "frame.", "memstore."} {
		if bytes.Contains(out, []byte(internal)) {
			t.Errorf("go doc . names %q, which a user cannot import:\n%s", internal, out)
		}
	}
}
