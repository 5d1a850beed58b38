package manifest

import (
	"strconv"
	"strings"
)

// KeyKind is what a key under a layout's root is, by its shape.
type KeyKind int

const (
	// KeyForeign is any key that does not have the layout's shape; gc
	// never touches one.
	KeyForeign KeyKind = iota
	// KeyStageManifest is {query}/stage-{n}/manifest.json.
	KeyStageManifest
	// KeyWorkerManifest is {query}/stage-{n}/worker-{w}/manifest.json.
	KeyWorkerManifest
	// KeyData is a data object, under its stage or spread under a shard.
	KeyData
	// KeyIndex is a sealed stage's index, or a lost seal's.
	KeyIndex
	// KeyGuardProbe is a commit guard probe whose delete failed.
	KeyGuardProbe
	// KeyReadyProbe is a key in the folder that the readiness probe
	// lists, which should hold none.
	KeyReadyProbe
)

// Key is a key parsed by Layout.Parse. Query and Stage are set for every
// kind but KeyForeign and the probes' kinds, Worker for manifests of
// workers and data, Attempt for data.
type Key struct {
	Kind    KeyKind
	Query   string
	Stage   int
	Worker  string
	Attempt string
}

// Parse is the one reading of the layout's key grammar, the inverse of
// the key functions above:
//
//	{root}{query}/stage-{n}/manifest.json
//	{root}{query}/stage-{n}/index-{seal}.bin
//	{root}{query}/stage-{n}/worker-{w}/manifest.json
//	{root}{query}/stage-{n}/worker-{w}/attempt-{a}/data-{write}-{i}.arrows (or data-{i}.arrows)
//	{root}~{shard}/{query}/stage-{n}/worker-{w}/attempt-{a}/data-{write}-{i}.arrows
//	{root}~commit-guard/{16 hex digits}
//	{root}~readyz/{any name}
//
// IDs must pass ValidateID, and numbers are canonical decimals ("stage-01"
// is not stage 1). Anything else is foreign: Parse returns ok false and
// a Key of kind KeyForeign.
func (l Layout) Parse(key string) (k Key, ok bool) {
	rest, found := strings.CutPrefix(key, l.Root())
	if !found {
		return Key{}, false
	}
	switch {
	case isGuardProbe(rest):
		return Key{Kind: KeyGuardProbe}, true
	case isReadyProbe(rest):
		return Key{Kind: KeyReadyProbe}, true
	}
	// A data object spread over key_spread prefixes, and nothing else
	// (one shard folder: a query ID cannot start with spreadMark).
	if _, tail, spread := ParseSpread(rest); spread {
		if k, ok := (Layout{}).Parse(tail); ok && k.Kind == KeyData && !strings.HasPrefix(tail, spreadMark) {
			return k, true
		}
		return Key{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 3 || ValidateID("query", parts[0]) != nil {
		return Key{}, false
	}
	stage, ok := parseStageDir(parts[1])
	if !ok {
		return Key{}, false
	}
	k = Key{Query: parts[0], Stage: stage}
	switch {
	case len(parts) == 3 && parts[2] == "manifest.json":
		k.Kind = KeyStageManifest
		return k, true
	case len(parts) == 3 && parseIndexName(parts[2]):
		k.Kind = KeyIndex
		return k, true
	}
	w, found := strings.CutPrefix(parts[2], "worker-")
	if !found || ValidateID("worker", w) != nil {
		return Key{}, false
	}
	k.Worker = w
	switch {
	case len(parts) == 4 && parts[3] == "manifest.json":
		k.Kind = KeyWorkerManifest
		return k, true
	case len(parts) == 5:
		a, found := strings.CutPrefix(parts[3], "attempt-")
		if !found || ValidateID("attempt", a) != nil {
			return Key{}, false
		}
		if _, _, ok := parseDataName(parts[4]); !ok {
			return Key{}, false
		}
		k.Kind, k.Attempt = KeyData, a
		return k, true
	}
	return Key{}, false
}

// parseStageDir reads a stage folder's name, "stage-{n}", n a canonical
// decimal.
func parseStageDir(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "stage-")
	if !ok {
		return 0, false
	}
	return parseCanonical(s)
}

// parseCanonical reads a non-negative decimal written as strconv.Itoa
// writes it: no sign, no leading zeros.
func parseCanonical(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}
