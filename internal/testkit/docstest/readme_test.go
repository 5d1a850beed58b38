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

// TestReadmeLibrary holds the README's library snippet to the body of
// the root package's Example_worker (example_worker_test.go), which go
// test runs against the embedded server and checks by its Output; and
// builds and runs that text as a program in a module of its own outside
// the repository (a replace of the root, no workspace), so the README
// cannot name a function, option or signature the library does not have,
// nor an internal package.
func TestReadmeLibrary(t *testing.T) {
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
	example, err := os.ReadFile(filepath.Join(root, "example_worker_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	imports, body, want := exampleParts(t, string(example), "Example_worker")
	if m[1] != body {
		t.Fatalf("the README's library snippet is not the body of Example_worker in example_worker_test.go (copy it, one tab less):\n--- README:\n%s--- Example_worker:\n%s", m[1], body)
	}
	dir := t.TempDir()
	src := "package main\n\n" + imports + "\n\nfunc main() {\n" + body + "}\n"
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
		t.Fatalf("the README's library code does not build against the exported API: %v\n%s\n--- the code:\n%s", err, out, src)
	}
	run := exec.CommandContext(ctx, filepath.Join(dir, "readme"))
	run.Dir = dir
	out, err := run.CombinedOutput()
	if err != nil || string(out) != want {
		t.Fatalf("the README's library code, run: %v\n%s--- want the Output of Example_worker:\n%s", err, out, want)
	}
}

// exampleParts returns the import block of an example file, the body of
// its function name one tab less (its Output comment included), and the
// output that comment wants.
func exampleParts(t *testing.T, src, name string) (imports, body, output string) {
	t.Helper()
	i := strings.Index(src, "\nimport (\n")
	j := strings.Index(src, "\n)\n")
	if i < 0 || j < i {
		t.Fatal("example_worker_test.go has no import block")
	}
	imports = src[i+1 : j+2]
	open := "\nfunc " + name + "() {\n"
	k := strings.Index(src, open)
	if k < 0 {
		t.Fatalf("example_worker_test.go has no %s", name)
	}
	rest := src[k+len(open):]
	end := strings.Index(rest, "\n}\n")
	if end < 0 {
		t.Fatalf("%s has no end", name)
	}
	var b, out strings.Builder
	inOutput := false
	for _, l := range strings.Split(rest[:end], "\n") {
		l = strings.TrimPrefix(l, "\t")
		b.WriteString(l + "\n")
		switch {
		case l == "// Output:":
			inOutput = true
		case inOutput && strings.HasPrefix(l, "// "):
			out.WriteString(strings.TrimPrefix(l, "// ") + "\n")
		}
	}
	return imports, b.String(), out.String()
}
