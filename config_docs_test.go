package durashuffle

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigurationDocInSync fails when docs/configuration.md and the
// Config struct disagree. `make docs` rewrites the page.
func TestConfigurationDocInSync(t *testing.T) {
	path := filepath.Join("docs", "configuration.md")
	want := configMarkdown()
	if os.Getenv("DURASHUFFLE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run make docs)", err)
	}
	if string(got) != want {
		t.Fatalf("%s is out of date with the Config struct: run make docs", path)
	}
	for _, k := range Keys() {
		if k.Doc == "" {
			t.Errorf("config key %s has no doc tag", k.Name)
		}
	}
}

// The memory_limit key's doc says what auto computes: the bound with its
// runtime headroom, less unmanagedMemory, and the defaults' limit.
func TestMemoryLimitDocMatchesCode(t *testing.T) {
	var doc string
	for _, k := range Keys() {
		if k.Name == "memory_limit" {
			doc = k.Doc
		}
	}
	auto := DefaultConfig().SoftMemoryLimit(MemoryLoad{Writers: 1})
	for _, want := range []string{
		fmt.Sprintf("+ %d MiB", runtimeHeadroom/MiB),
		fmt.Sprintf("less %d MiB", unmanagedMemory/MiB),
		fmt.Sprintf("%d MiB with the defaults and one writer", auto/MiB),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("memory_limit's doc does not say %q:\n%s", want, doc)
		}
	}
}
