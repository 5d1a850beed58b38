package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// useDocs says what each use's keys configure, for the README's table.
var useDocs = map[keyUse]string{
	useStore:   "the connection",
	usePut:     "objects put and committed",
	useWrite:   "the write path",
	useRead:    "the read path",
	useHedge:   "hedged uploads and reads",
	useGC:      "gc",
	useSidecar: "the sidecar",
	useAuth:    "the sidecar's token",
	useKey:     "client-side encryption (`demo --encrypt`)",
}

// Between these markers the README has flagTable's text.
const (
	flagTableStart = "<!-- flag table: generated from cmd/durashuffle/flags.go by make docs -->\n"
	flagTableEnd   = "<!-- end of flag table -->\n"
)

// flagTable renders which commands take the flags of which keys, from
// keyUses and commandUses, in the commands' order on the command line.
func flagTable(t *testing.T) string {
	var cmds []string
	for _, c := range (&app{}).rootCommand().Commands() {
		if _, ok := commandUses[c.Name()]; ok {
			cmds = append(cmds, c.Name())
		}
	}
	var b strings.Builder
	b.WriteString("| keys | flags on |\n|---|---|\n")
	for use := useStore; use <= useKey; use <<= 1 {
		if useDocs[use] == "" {
			t.Fatalf("use %d has no entry in useDocs", use)
		}
		var keys, on []string
		for _, k := range Keys() {
			if keyUses[k.Name] == use {
				keys = append(keys, "`"+k.Name+"`")
			}
		}
		for _, c := range cmds {
			if commandUses[c]&use != 0 {
				on = append(on, "`"+c+"`")
			}
		}
		if len(on) == len(cmds) {
			on = []string{"every command"}
		}
		fmt.Fprintf(&b, "| %s: %s | %s |\n", useDocs[use], strings.Join(keys, ", "), strings.Join(on, ", "))
	}
	return b.String()
}

// TestReadmeFlagTable holds the README's table of which command takes
// which keys' flags to flags.go. make docs rewrites it.
func TestReadmeFlagTable(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i, j := strings.Index(s, flagTableStart), strings.Index(s, flagTableEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %q ... %q section", flagTableStart, flagTableEnd)
	}
	want := flagTable(t)
	if os.Getenv("DURASHUFFLE_UPDATE_DOCS") == "1" {
		s = s[:i+len(flagTableStart)] + want + s[j:]
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := s[i+len(flagTableStart) : j]; got != want {
		t.Fatalf("README.md's flag table is out of date with flags.go: run make docs\n--- README:\n%s--- flags.go:\n%s", got, want)
	}
}
