package docstest

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
)

// docPages are the pages whose paths TestDocPaths checks: the README,
// BENCHMARKS.md and every page under docs/.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages := []string{"README.md", "BENCHMARKS.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(more) < 5 {
		t.Fatalf("docs/*.md: %d pages, want design, format, configuration, operations, sidecar, interop and more", len(more))
	}
	for _, p := range more {
		rel, _ := filepath.Rel(root, p)
		pages = append(pages, filepath.ToSlash(rel))
	}
	return pages
}

var (
	// A Markdown link's target: [text](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// Code spans; within them a path is a token of path characters.
	codeSpan  = regexp.MustCompile("`([^`\n]+)`")
	pathToken = regexp.MustCompile(`(?:^|[\s(=])((?:\./)?[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_.-]+)*/?)`)
	// The library's Go packages, named by import path.
	goPackage = regexp.MustCompile(`github\.com/durashuffle/durashuffle((?:/[a-z0-9_-]+)*)`)
	// Files by the extensions the repository's own files have.
	fileExt = regexp.MustCompile(`\.(go|md|sh|yml|yaml|json|png|mod|txt|py|js)$`)
)

// notInRepo are paths the pages name that are not the repository's:
// what a build makes, where things are installed, what the pages tell
// the reader to create, and Go packages of other modules.
var notInRepo = []string{
	"bin/",             // make build's output
	"testdata/fuzz",    // Go's fuzz corpus, created per package by go test -fuzz
	"durashuffle.yaml", // the reader's own config file in examples
	"FILE.",            // a placeholder: --plot FILE.png
}

// topLevel reports whether p starts with an entry of the repository's
// root (a folder or a file), which is what makes a bare token such as
// `reader/decodebudget.go` or `Makefile` a path rather than a word.
func topLevel(root, p string) bool {
	first, _, _ := strings.Cut(strings.TrimPrefix(p, "./"), "/")
	_, err := os.Stat(filepath.Join(root, first))
	return err == nil
}

// pathsOf lists what page names as repository paths: every relative
// link target, every code-span token that has a slash and starts with a
// root entry or ends in a known file extension, and every import path
// of the library. Each comes with the directory it is relative to.
func pathsOf(root, page, text string) (paths []string, pkgs []string) {
	dir := filepath.Dir(page)
	add := func(p string, linked bool) {
		p = strings.TrimRight(p, ".,;:")
		if p == "" || strings.ContainsAny(p, "{}<>*$~") || strings.HasPrefix(p, "-") {
			return
		}
		for _, skip := range notInRepo {
			if strings.HasPrefix(p, skip) {
				return
			}
		}
		if linked {
			paths = append(paths, filepath.ToSlash(filepath.Join(dir, p)))
			return
		}
		if !strings.Contains(strings.TrimPrefix(p, "./"), "/") && !fileExt.MatchString(p) {
			return // a word, a flag value, a key
		}
		if !topLevel(root, p) && !fileExt.MatchString(p) {
			return // an S3 key, a URL path, a flag's value
		}
		paths = append(paths, "?"+dir+"|"+strings.TrimPrefix(p, "./"))
	}
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		target, _, _ := strings.Cut(m[1], "#")
		if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		add(target, true)
	}
	for _, m := range goPackage.FindAllStringSubmatch(text, -1) {
		pkgs = append(pkgs, strings.TrimPrefix(m[1], "/"))
	}
	scan := func(s string) {
		if strings.Contains(s, "://") || strings.Contains(s, "github.com/") {
			return
		}
		for _, tok := range pathToken.FindAllStringSubmatch(s, -1) {
			add(tok[1], false)
		}
	}
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		scan(m[1])
	}
	// Commands in fenced blocks name packages as ./path.
	for _, block := range strings.Split(text, "```")[1:] {
		for _, tok := range regexp.MustCompile(`(?:^|\s)(\./[A-Za-z0-9_./-]+)`).FindAllStringSubmatch(block, -1) {
			add(tok[1], false)
		}
	}
	return paths, pkgs
}

// TestDocPaths: every repository path that README.md, BENCHMARKS.md and
// docs/*.md name exists (links relative to the page, code spans
// relative to the root or the page), and every package of the library
// they name by import path is a folder with Go files. A page that
// names a file that moved or was removed fails here, naming the page
// and the path.
func TestDocPaths(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// A bare file name (`binary.go` of "manifest/ (`binary.go`)") must be
	// the name of some file of the repository.
	base := map[string]bool{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if err == nil {
			base[d.Name()] = true
		}
		return nil
	})
	checked := 0
	for _, page := range docPages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		paths, pkgs := pathsOf(root, page, string(b))
		for _, p := range paths {
			checked++
			if rel, ok := strings.CutPrefix(p, "?"); ok {
				dir, name, _ := strings.Cut(rel, "|")
				if exists(root, name) || exists(root, filepath.Join(dir, name)) ||
					(!strings.Contains(name, "/") && base[name]) {
					continue
				}
				t.Errorf("%s names %s, which is not in the repository", page, name)
				continue
			}
			if !exists(root, p) {
				t.Errorf("%s links %s, which is not in the repository", page, p)
			}
		}
		for _, pkg := range pkgs {
			checked++
			if !hasGo(filepath.Join(root, pkg)) {
				t.Errorf("%s names the package github.com/durashuffle/durashuffle/%s, which has no Go files in the repository", page, pkg)
			}
		}
	}
	// The pages name over a hundred paths; a parser that finds few has
	// stopped looking.
	if checked < 80 {
		t.Errorf("found %d paths in the pages, want at least 80: the path finder is broken", checked)
	}
}

func exists(root, p string) bool {
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
	return err == nil
}

func hasGo(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	return len(m) > 0
}

// TestFormatVersionInDocs: docs/format.md's title states the version of
// the manifests the code writes (manifest.FormatVersion).
func TestFormatVersionInDocs(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "format.md"))
	if err != nil {
		t.Fatal(err)
	}
	title, _, _ := strings.Cut(string(b), "\n")
	m := regexp.MustCompile(`\(version (\d+\.\d+)\)`).FindStringSubmatch(title)
	if m == nil {
		t.Fatalf("docs/format.md's title %q states no (version N.M)", title)
	}
	if m[1] != manifest.FormatVersion {
		t.Errorf("docs/format.md's title states version %s; the code writes %s (manifest.FormatVersion)", m[1], manifest.FormatVersion)
	}
}

// outside are references to things a person who clones the repository
// does not have. Upstream work is cited by link (apache/druid#16481),
// never by a bare number. The expressions are spelled so that they do
// not match themselves.
var outside = []*regexp.Regexp{
	regexp.MustCompile(`\.\./shared`),
	regexp.MustCompile(`shared[/\\]DESIGN`),
	regexp.MustCompile(`(?i)\bissues?\s+#?[0-9]`),
	regexp.MustCompile(`(?i)\bthis\s+sess(?:ion)\b`),
	regexp.MustCompile(`(?i)\bmachine\s+where\b`),
	regexp.MustCompile(`(?i)\bthe\s+issue[']s\b`),
}

// TestNoOutsideReferences: no text file of the repository refers to a
// folder, a document or a tracker entry outside it.
func TestNoOutsideReferences(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 {
			return nil // binary
		}
		files++
		rel, _ := filepath.Rel(root, p)
		for i, line := range strings.Split(string(b), "\n") {
			for _, re := range outside {
				if m := re.FindString(line); m != "" {
					t.Errorf("%s:%d refers to something outside the repository (%q): %s", rel, i+1, m, strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("scanned %d text files under %s, want the whole repository", files, root)
	}
}
