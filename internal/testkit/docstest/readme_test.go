package docstest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestReadmeLibraryBuilds compiles the Go function of the README's
// library section in a module of its own outside the repository (a
// replace of the root, no workspace), so the README cannot name a
// function, option or signature the library does not have, nor an
// internal package.
func TestReadmeLibraryBuilds(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sec := string(readme)
	i := strings.Index(sec, "\n## The library\n")
	if i < 0 {
		t.Fatal(`README.md has no "## The library" section`)
	}
	sec = sec[i+1:]
	if j := strings.Index(sec[3:], "\n## "); j >= 0 {
		sec = sec[:j+3]
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(sec)
	if m == nil {
		t.Fatal("the README's library section has no Go block")
	}
	dir := t.TempDir()
	src := `package main

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/durashuffle/durashuffle"
)

func main() { _ = shuffle }

var _ arrow.RecordBatch
var _ = context.Background

` + m[1]
	gomod := "module example.com/readme\n\ngo 1.26.0\n\nrequire github.com/durashuffle/durashuffle v0.0.0-00010101000000-000000000000\n\nreplace github.com/durashuffle/durashuffle => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "examples", "engine", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"main.go": []byte(src), "go.mod": []byte(gomod), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "readme"), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's library code does not build against the exported API: %v\n%s\n--- the code:\n%s", err, out, m[1])
	}
}
