package docstest

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

const (
	libraryModule = "github.com/durashuffle/durashuffle"
	cliModule     = libraryModule + "/cmd/durashuffle"
	// testVersion is the version both modules are served as: a user
	// installs a tagged release the same way.
	testVersion = "v0.0.0-test"
)

// TestInstallFromProxy serves the working tree as version v0.0.0-test of
// the library's module and the command line's from a file-based module
// proxy (GOPROXY=file://), the way the modules are published once
// tagged, and installs the command line as a user would:
//
//	go install github.com/durashuffle/durashuffle/cmd/durashuffle@v0.0.0-test
//
// outside any module and workspace. The go command refuses to install a
// module whose go.mod has a replace directive, so the install works only
// when the command line builds from its requirements alone: the library
// at the same version (whose exported API is all it may use: the root
// package's TestImportsOnlyDownwards). Releasing is the same two steps: tag the library, then
// set the command line's requirement of it to that tag and tag
// cmd/durashuffle. The installed binary then runs a small demo.
func TestInstallFromProxy(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, gomod := range []string{"go.mod", filepath.Join("cmd", "durashuffle", "go.mod")} {
		b, err := os.ReadFile(filepath.Join(root, gomod))
		if err != nil {
			t.Fatal(err)
		}
		if directive(b, "replace") {
			t.Errorf("%s has a replace directive: a module a user installs must build from its requirements alone", gomod)
		}
	}
	files := trackedFiles(t, root)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	proxy := t.TempDir()
	modcache := goEnv(t, "GOMODCACHE")
	if err := os.MkdirAll(filepath.Join(modcache, "cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	lockModuleCache(t, filepath.Join(modcache, "cache", "durashuffle-install-test.lock"))
	forget := func() { forgetModule(t, modcache) }
	forget() // a copy of v0.0.0-test from an earlier run is of an older tree
	t.Cleanup(forget)
	upstream := goEnv(t, "GOPROXY")
	env := append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+","+upstream,
		"GONOSUMDB="+libraryModule, "GOPRIVATE=", "GONOPROXY=",
		"GOWORK=off", "GOFLAGS=-modcacherw",
		// The go command indexes a module cache directory once, as if its
		// contents could never change; v0.0.0-test changes with the tree.
		"GODEBUG=goindex=0")
	gocmd := func(dir string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = dir, env
		return cmd.CombinedOutput()
	}

	// The library: every tracked file outside the nested modules.
	nested := nestedModules(files)
	var lib []string
	for _, f := range files {
		if !under(f, nested) {
			lib = append(lib, f)
		}
	}
	libMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, proxy, libraryModule, root, lib, libMod, nil)

	// Every module is published as its release is: its go.mod requires
	// the modules of the tree at the same version, and its go.sum
	// carries their checksums. The library first, then the stores'
	// modules (store/...), then the command line, which requires them.
	work := t.TempDir()
	sums := map[string]string{} // module: its go.sum lines
	download := func(module string) {
		out, err := gocmd(work, "mod", "download", "-json", module+"@"+testVersion)
		if err != nil {
			t.Fatalf("go mod download %s@%s from the file proxy: %v\n%s", module, testVersion, err, out)
		}
		var dl struct{ Sum, GoModSum string }
		if err := json.Unmarshal(out, &dl); err != nil || dl.Sum == "" || dl.GoModSum == "" {
			t.Fatalf("go mod download %s: no checksums (%v):\n%s", module, err, out)
		}
		sums[module] = fmt.Sprintf("%s %s %s\n%s %s/go.mod %s\n", module, testVersion, dl.Sum, module, testVersion, dl.GoModSum)
	}
	download(libraryModule)
	publishNested := func(dir, module string) {
		modDir := filepath.Join(root, filepath.FromSlash(dir))
		gomod, err := os.ReadFile(filepath.Join(modDir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if directive(gomod, "replace") {
			t.Errorf("%s/go.mod has a replace directive: a module a user installs must build from its requirements alone", dir)
		}
		gosum, err := os.ReadFile(filepath.Join(modDir, "go.sum"))
		if err != nil {
			t.Fatal(err)
		}
		for dep, lines := range sums {
			req := regexp.MustCompile(`(?m)^(\s*(?:require\s+)?` + regexp.QuoteMeta(dep) + `) v\S+$`)
			if req.Match(gomod) {
				gomod = req.ReplaceAll(gomod, []byte("${1} "+testVersion))
				gosum = append(gosum, lines...)
			}
		}
		if !bytes.Contains(gomod, []byte(libraryModule+" "+testVersion)) {
			t.Fatalf("%s/go.mod does not require %s", dir, libraryModule)
		}
		var own []string
		for _, f := range files {
			if r, ok := strings.CutPrefix(f, dir+"/"); ok && !under(f, otherThan(nested, dir)) {
				own = append(own, r)
			}
		}
		publish(t, proxy, module, modDir, own, gomod, map[string][]byte{"go.sum": gosum})
		download(module)
	}
	for _, dir := range nested {
		if strings.HasPrefix(dir, "store/") {
			publishNested(dir, libraryModule+"/"+dir)
		}
	}
	publishNested("cmd/durashuffle", cliModule)

	bin := t.TempDir()
	env = append(env, "GOBIN="+bin)
	if out, err := gocmd(work, "install", cliModule+"@"+testVersion); err != nil {
		t.Fatalf("go install %s@%s: %v\n%s", cliModule, testVersion, err, out)
	}
	exe := filepath.Join(bin, "durashuffle")
	info, err := gocmd(work, "version", "-m", exe)
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, info)
	}
	for _, want := range []string{"mod\t" + cliModule + "\t" + testVersion, "dep\t" + libraryModule + "\t" + testVersion} {
		if !bytes.Contains(info, []byte(want)) {
			t.Errorf("the installed binary does not record %q:\n%s", want, info)
		}
	}
	if bytes.Contains(info, []byte("=>")) {
		t.Errorf("the installed binary was built with a replacement:\n%s", info)
	}
	demo := exec.CommandContext(ctx, exe, "demo", "--json", "--rows", "20000", "--workers", "2", "--partitions", "8", "--quiet")
	demo.Dir = work
	demo.Env = append(os.Environ(), "HOME="+work)
	got, err := demo.Output()
	if err != nil {
		t.Fatalf("the installed durashuffle demo: %v\n%s", err, got)
	}
	var sum struct {
		Written  int64 `json:"rows_written"`
		Read     int64 `json:"rows_read"`
		Verified bool  `json:"verified"`
	}
	if err := json.Unmarshal(got, &sum); err != nil {
		t.Fatalf("demo --json: %v\n%s", err, got)
	}
	if !sum.Verified || sum.Written != 20000 || sum.Read != 20000 {
		t.Fatalf("the installed durashuffle demo: %d rows written, %d read, verified %v; want 20000 of each, verified:\n%s", sum.Written, sum.Read, sum.Verified, got)
	}
}

// directive says whether the go.mod text b has a directive named name
// (on its own line or opening a block).
func directive(b []byte, name string) bool {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// trackedFiles lists the files git tracks under root, slash-separated,
// that are present in the working tree.
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	var files []string
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if fi, err := os.Lstat(filepath.Join(root, f)); err == nil && fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	if len(files) < 100 {
		t.Fatalf("git ls-files found %d files: not the repository?", len(files))
	}
	return files
}

// nestedModules returns the directories, other than the root, that hold
// a go.mod: modules of their own, outside the library's.
func nestedModules(files []string) []string {
	var dirs []string
	for _, f := range files {
		if dir, ok := strings.CutSuffix(f, "/go.mod"); ok {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

func otherThan(dirs []string, dir string) []string {
	var out []string
	for _, d := range dirs {
		if d != dir {
			out = append(out, d)
		}
	}
	return out
}

func under(f string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(f, d+"/") {
			return true
		}
	}
	return false
}

// publish writes module at testVersion into the file proxy: its list,
// .info, .mod and a .zip of files (relative to dir), with the files of
// override in place of the tree's, laid out as the module zip format
// requires (every path under module@version/).
func publish(t *testing.T, proxy, module, dir string, files []string, gomod []byte, override map[string][]byte) {
	t.Helper()
	at := filepath.Join(proxy, filepath.FromSlash(module), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name string, b []byte) {
		w, err := zw.Create(module + "@" + testVersion + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		if f == "go.mod" || override[f] != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		add(f, b)
	}
	add("go.mod", gomod)
	for name, b := range override {
		add(name, b)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"list":                []byte(testVersion + "\n"),
		testVersion + ".info": fmt.Appendf(nil, `{"Version":%q,"Time":"2026-01-01T00:00:00Z"}`, testVersion),
		testVersion + ".mod":  gomod,
		testVersion + ".zip":  buf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(at, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// forgetModule removes the module cache's copies of both modules at
// testVersion, so that the next download reads the proxy's.
func forgetModule(t *testing.T, modcache string) {
	t.Helper()
	stores, _ := filepath.Glob(filepath.Join(modcache, filepath.FromSlash(libraryModule), "store", "*@"+testVersion))
	for _, p := range append([]string{
		filepath.Join(modcache, "cache", "download", filepath.FromSlash(libraryModule)),
		filepath.Join(modcache, filepath.FromSlash(libraryModule)+"@"+testVersion),
		filepath.Join(modcache, filepath.FromSlash(cliModule)+"@"+testVersion),
	}, stores...) {
		filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(path, 0o755) // the module cache is read-only
			}
			return nil
		})
		if err := os.RemoveAll(p); err != nil {
			t.Fatalf("removing %s from the module cache: %v", p, err)
		}
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}
