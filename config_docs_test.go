package durashuffle

import (
	"os"
	"path/filepath"
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
