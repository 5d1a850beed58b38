package durashuffle_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// The library's packages import only downwards, in the order the data
// flows: store < frame < chunker < uploader < manifest < reader < the
// root package < the sidecar < the command line. Engine utilities sit
// below whatever uses them. importLayers states that order as data,
// lowest first, by path relative to the module; a package may import
// only packages of a lower layer (never one of its own). A path ending
// in "/..." stands for every package under it.
var importLayers = [][]string{
	// The checks of untrusted IPC headers, then Arrow's checks and
	// arrow-go workarounds: over Arrow alone.
	{"internal/ipcguard"},
	{"internal/arrowcheck"},
	// The partitioning hash and row selection, over Arrow alone too; the
	// memory store's held worker, the one type the library reports and
	// the sidecar's wire sends.
	{"internal/arrowipc", "partition", "internal/held"},
	// Leaf utilities; flightclient, the sidecar's public client and wire
	// types; internal/entry, what the chunker produces and the manifest
	// stores: they import nothing of durashuffle's but arrowcheck.
	// internal/stall, the stores' cut of a body that makes no progress;
	// internal/opname, Azure's and GCS's operation names; internal/reqs,
	// request-count arithmetic for the command line; internal/gchold,
	// the mark gc holds a stage's combined.json by while it deletes.
	{"internal/safe", "internal/spill", "internal/memstore", "internal/testkit/demo", "flightclient", "internal/entry", "internal/stall", "internal/opname", "internal/reqs", "internal/gchold"},
	{"store", "internal/hedge"},
	// Utilities over a store, and the metrics (which observe the layers
	// above through small interfaces of theirs, asserted by the root
	// package's wiring).
	{"internal/retry", "internal/s3store", "internal/metrics", "store/storetest", "embedded"},
	{"internal/frame"},
	{"chunker"},
	{"uploader"},
	{"manifest"},
	// The stage keys: derived from a root key, or a query's data key
	// from KMS stored beside the query; the manifests record them.
	{"internal/keys"},
	{"reader"},
	// Combining a sealed stage's objects: over the reader's errors.
	{"combine"},
	// gc knows a combined stage's first level.
	{"internal/gc"},
	{"internal/peer"},
	{""}, // the root package
	{"sidecar"},
	// Test helpers: imported by tests only, they may use the whole library.
	// The servers and the fault proxy come first: the store suite runs
	// over them.
	{"internal/testkit/testenv", "internal/testkit/faultproxy"},
	{"internal/testkit/..."},
}

const modulePath = "github.com/durashuffle/durashuffle"

type listedPackage struct {
	ImportPath   string
	Module       *struct{ Path string }
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// listPackages runs go list over the library's module and the command
// line's (joined by go.work).
func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Module,Imports,TestImports,XTestImports,Error", "./...", "./cmd/durashuffle/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages, too few to be the library and the command line", len(pkgs))
	}
	return pkgs
}

// rel returns path relative to the library's module ("" for the root
// package) and whether it is under it at all.
func rel(path string) (string, bool) {
	if path == modulePath {
		return "", true
	}
	r, ok := strings.CutPrefix(path, modulePath+"/")
	return r, ok
}

// layerOf returns the layer of the library package at path (relative),
// or -1 when importLayers does not place it.
func layerOf(path string) int {
	for i, layer := range importLayers {
		for _, p := range layer {
			if p == path {
				return i
			}
			if under, ok := strings.CutSuffix(p, "/..."); ok && strings.HasPrefix(path, under+"/") {
				return i
			}
		}
	}
	return -1
}

func layerName(path string) string {
	if path == "" {
		return "the root package"
	}
	return path
}

// checkImports returns the violations of the order in pkgs: imports of
// a package of the same or a higher layer, and library packages the
// order does not place. Packages of other modules are not checked: the
// command line's module sits under the library's import path, so Go lets
// it use the library's internal/ packages (a release pins the library
// version it was built with), and Go itself refuses them to any module
// outside that path.
func checkImports(pkgs []listedPackage) []string {
	var bad []string
	for _, p := range pkgs {
		from, ok := rel(p.ImportPath)
		if !ok || p.Module == nil || p.Module.Path != modulePath {
			continue
		}
		fl := layerOf(from)
		if fl < 0 {
			bad = append(bad, fmt.Sprintf("%s is not placed in the import order (importLayers): add it to the lowest layer above everything it imports", layerName(from)))
			continue
		}
		// The package's own files only: its tests may use helpers above it.
		for _, imp := range p.Imports {
			to, ok := rel(imp)
			if !ok {
				continue
			}
			tl := layerOf(to)
			if tl >= fl {
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s (layer %d): a package imports only packages of lower layers", layerName(from), fl, layerName(to), tl))
			}
		}
	}
	return bad
}

// TestImportsOnlyDownwards: no package of the library imports one of
// its own or a higher layer of importLayers, and every package is placed
// in it.
func TestImportsOnlyDownwards(t *testing.T) {
	pkgs := listPackages(t)
	for _, b := range checkImports(pkgs) {
		t.Error(b)
	}
}

// TestImportsCheckFails: the check names an upward import and an
// unplaced package, and lets the command line use internal/.
func TestImportsCheckFails(t *testing.T) {
	lib := &struct{ Path string }{modulePath}
	cli := &struct{ Path string }{modulePath + "/cmd/durashuffle"}
	pkgs := []listedPackage{
		{ImportPath: modulePath + "/store", Module: lib, Imports: []string{modulePath + "/manifest"}},
		{ImportPath: modulePath + "/internal/newthing", Module: lib},
		{ImportPath: modulePath + "/cmd/durashuffle", Module: cli, TestImports: []string{modulePath + "/internal/spill"}},
		{ImportPath: modulePath + "/reader", Module: lib, Imports: []string{modulePath + "/manifest", "io"}},
	}
	got := strings.Join(checkImports(pkgs), "\n")
	for _, want := range []string{
		"store (layer 4) imports manifest (layer 9)",
		"internal/newthing is not placed in the import order",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the check does not report %q; it reports:\n%s", want, got)
		}
	}
	if strings.Contains(got, "reader") || strings.Contains(got, "cmd/durashuffle") {
		t.Errorf("the check reports reader's downward import of manifest or the command line's use of internal/:\n%s", got)
	}
}
