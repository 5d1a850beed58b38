package docstest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

var (
	// An ATX heading, outside fenced blocks.
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#*$`)
	// A link with a fragment: [text](page.md#anchor) or [text](#anchor).
	mdAnchorLink = regexp.MustCompile(`\]\(([^)\s#]*)#([^)\s]+)\)`)
	// What GitHub drops from a heading to make its anchor.
	slugDrop = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
)

// slug is the anchor GitHub gives a heading: lower case, punctuation
// dropped, spaces turned into hyphens.
func slug(heading string) string {
	return strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), ""), " ", "-")
}

// anchorsOf lists the anchors of a Markdown page's headings.
func anchorsOf(text string) map[string]bool {
	out := map[string]bool{}
	for i, part := range strings.Split(text, "```") {
		if i%2 == 1 {
			continue // inside a fenced block
		}
		for _, m := range mdHeading.FindAllStringSubmatch(part, -1) {
			out[slug(m[1])] = true
		}
	}
	return out
}

// TestDocAnchors: every link from README.md, BENCHMARKS.md or a
// docs/*.md page to a heading of one of those pages (page.md#anchor, or
// #anchor within the page) names a heading the page has, so a page split
// or a heading renamed cannot leave a link pointing at nothing.
func TestDocAnchors(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	for _, page := range docPages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		texts[page] = string(b)
	}
	anchors := map[string]map[string]bool{}
	for page, text := range texts {
		anchors[page] = anchorsOf(text)
	}
	checked := 0
	for page, text := range texts {
		for _, m := range mdAnchorLink.FindAllStringSubmatch(text, -1) {
			target, anchor := m[1], m[2]
			if strings.Contains(target, "://") {
				continue
			}
			if target == "" {
				target = page
			} else {
				target = filepath.ToSlash(filepath.Join(filepath.Dir(page), target))
			}
			have, ok := anchors[target]
			if !ok {
				continue // not a page of these (a source file's line, say)
			}
			checked++
			if !have[anchor] {
				t.Errorf("%s links %s#%s, which has no such heading", page, target, anchor)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d links to headings, want at least 20: the link finder is broken", checked)
	}
}

// TestSlug: anchors as GitHub makes them.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"The soft memory limit (`memory_limit`)":          "the-soft-memory-limit-memory_limit",
		"Bucket lifecycle rule: abort incomplete uploads": "bucket-lifecycle-rule-abort-incomplete-uploads",
		"Spill: local disk for sorted runs":               "spill-local-disk-for-sorted-runs",
		"The fast path: a memory tier, S3 the truth":      "the-fast-path-a-memory-tier-s3-the-truth",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
