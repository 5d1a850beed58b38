package docstest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// Longest pages: a page longer than this is a notebook, not a reference
// a reader takes in at once. BENCHMARKS.md holds the generated tables of
// every scenario, each with what it means; a docs page is one task.
const (
	maxBenchmarksLines = 450
	maxDocsPageLines   = 600
)

// TestDocLengths: BENCHMARKS.md is at most 450 lines and every
// docs/*.md page at most 600, each failure naming the page, its length
// and its limit.
func TestDocLengths(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 5 {
		t.Fatalf("docs/*.md: %d pages under %s, want the docs folder's pages", len(pages), root)
	}
	limits := map[string]int{filepath.Join(root, "BENCHMARKS.md"): maxBenchmarksLines}
	for _, p := range pages {
		limits[p] = maxDocsPageLines
	}
	for path, limit := range limits {
		rel, _ := filepath.Rel(root, path)
		if n := lineCount(t, path); n > limit {
			t.Errorf("%s has %d lines, more than %d: split it by task or fold what it repeats", filepath.ToSlash(rel), n, limit)
		}
	}
}

// lineCount counts the lines of the file at path, a last line without
// its newline included, as wc -l counts a file that ends in one.
func lineCount(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(string(b), "\n")
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// TestLineCount: the counter agrees with wc -l, so a page at the limit
// passes and one line more fails.
func TestLineCount(t *testing.T) {
	dir := t.TempDir()
	for text, want := range map[string]int{"": 0, "a": 1, "a\n": 1, "a\nb": 2, "a\n\nb\n": 3} {
		p := filepath.Join(dir, "page.md")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := lineCount(t, p); got != want {
			t.Errorf("lineCount(%q) = %d, want %d", text, got, want)
		}
	}
}
