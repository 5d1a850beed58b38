package manifest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
)

// ErrInvalidID marks a query, worker or attempt ID that cannot be used in
// a key. It is raised before any request is made.
var ErrInvalidID = errors.New("invalid id")

// maxIDLength is the longest query, worker or attempt ID.
const maxIDLength = 128

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// ValidateID checks an ID of the given kind ("query", "worker", "attempt").
func ValidateID(kind, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: %s ID is empty", ErrInvalidID, kind)
	case len(id) > maxIDLength:
		return fmt.Errorf("%w: %s ID is %d characters, at most %d allowed", ErrInvalidID, kind, len(id), maxIDLength)
	case id == "." || id == "..":
		return fmt.Errorf("%w: %s ID %q is not allowed", ErrInvalidID, kind, id)
	case !idPattern.MatchString(id):
		return fmt.Errorf("%w: %s ID %q: only A-Z a-z 0-9 . _ - are allowed", ErrInvalidID, kind, id)
	}
	return nil
}

// ValidateStage checks a stage number.
func ValidateStage(stage int) error {
	if stage < 0 {
		return fmt.Errorf("%w: stage %d is negative", ErrInvalidID, stage)
	}
	return nil
}

// Layout maps stages to keys under a prefix:
//
//	{prefix}/{query}/stage-{stage}/worker-{worker}/attempt-{attempt}/data-{write}-{n}.arrows
//	{prefix}/{query}/stage-{stage}/worker-{worker}/manifest.json
//	{prefix}/{query}/stage-{stage}/manifest.json
//
// With Spread set (config key_spread), data objects live under one of
// Spread prefixes instead, chosen by a hash of the attempt, so that their
// PUTs and GETs spread over that many S3 prefixes rather than meeting in
// the stage's one:
//
//	{prefix}/~{shard}/{query}/stage-{stage}/worker-{worker}/attempt-{attempt}/data-{write}-{n}.arrows
//
// and so do a combined level's objects (package combine), by a hash of
// the task:
//
//	{prefix}/~{shard}/{query}/stage-{stage}/combine-{plan}/task-{n}/data-{write}.arrows
//
// Manifests stay where readers look for them. A manifest stores such an
// object's key relative to the root ("~{shard}/{query}/stage-..."); a
// reader and gc need no setting to find it.
type Layout struct {
	Prefix string
	// Spread is the number of data prefixes (0 or 1: none).
	Spread int
}

// Root is the prefix every key lives under, with a trailing slash (empty
// for an empty prefix).
func (l Layout) Root() string {
	p := strings.Trim(l.Prefix, "/")
	if p == "" {
		return ""
	}
	return p + "/"
}

// QueryPrefix is the prefix of all of a query's keys.
func (l Layout) QueryPrefix(query string) string { return l.Root() + query + "/" }

// StagePrefix is the prefix of all of a stage's keys.
func (l Layout) StagePrefix(query string, stage int) string {
	return l.QueryPrefix(query) + "stage-" + strconv.Itoa(stage) + "/"
}

// StageManifestKey is the sealed stage index.
func (l Layout) StageManifestKey(query string, stage int) string {
	return l.StagePrefix(query, stage) + "manifest.json"
}

// WorkerManifestKey is a worker's commit point.
func (l Layout) WorkerManifestKey(query string, stage int, worker string) string {
	return l.StagePrefix(query, stage) + "worker-" + worker + "/manifest.json"
}

// CombinePrefix starts the stage-relative folder of a combine plan's
// objects (package combine):
//
//	combine-{plan}/task-{n}.bin                  task n's manifest
//	combine-{plan}/task-{n}/data-{write}.arrows  task n's combined object
//	combine-{plan}/index-{seal}.bin              the combined level's index
const CombinePrefix = "combine-"

// PlanDir is the stage-relative folder of a combine plan's objects.
func PlanDir(planID string) string { return CombinePrefix + planID + "/" }

// TaskManifestName is the stage-relative key of combine task n's
// manifest.
func TaskManifestName(planID string, n int) string {
	return PlanDir(planID) + "task-" + strconv.Itoa(n) + ".bin"
}

// taskDataName is the stage-relative key of an attempt's combined object
// of task n (write: the attempt's own random ID).
func taskDataName(planID string, n int, write string) string {
	return PlanDir(planID) + "task-" + strconv.Itoa(n) + "/data-" + write + ".arrows"
}

// TaskDataKey is the key a task manifest stores for an attempt's combined
// object of task n: taskDataName, or with Spread its root-relative key
// under the shard prefix the task hashes to, as writers' data objects
// are spread
// (~{shard}/{query}/stage-{s}/combine-{plan}/task-{n}/data-{write}.arrows),
// so that the combined level's PUTs and GETs spread over the prefixes
// too. Every attempt of a task goes to the same shard. Readers and gc
// follow the manifests' keys and need no setting.
func (l Layout) TaskDataKey(query string, stage int, planID string, n int, write string) string {
	return l.spreadName(query, stage, PlanDir(planID)+"task-"+strconv.Itoa(n), taskDataName(planID, n, write))
}

// AttemptPrefix is the prefix of one attempt's data objects when Spread
// is 0 or 1 (with key spread they live under a shard prefix: DataKey).
func (l Layout) AttemptPrefix(query string, stage int, worker, attempt string) string {
	return l.StagePrefix(query, stage) + dataDir(worker, attempt)
}

// dataDir is the stage-relative folder of one attempt's data objects.
func dataDir(worker, attempt string) string {
	return "worker-" + worker + "/attempt-" + attempt + "/"
}

// DataName is the stage-relative key of data object n written by one
// writer of an attempt, as manifests store it without spreading:
//
//	worker-{worker}/attempt-{attempt}/data-{write}-{n}.arrows
//
// write is the writer's own random ID (NewWriteID), so that two writers
// given the same attempt ID (a retried task that reuses it, or two at
// once) never write to the same key: bytes that a manifest refers to are
// never overwritten.
func DataName(worker, attempt, write string, n int) string {
	return dataDir(worker, attempt) + "data-" + write + "-" + strconv.Itoa(n) + ".arrows"
}

// writeIDLength is the length of a write ID: 16 lowercase hex digits.
const writeIDLength = 16

// NewWriteID returns a fresh write ID: 64 random bits in hex.
func NewWriteID() string {
	var b [writeIDLength / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// WriteID returns the write ID of a writer's data key (DataKey, full or
// relative): the {write} of data-{write}-{n}.arrows; "" for any other key.
func WriteID(key string) string {
	w, _, ok := parseDataName(key[strings.LastIndexByte(key, '/')+1:])
	if !ok {
		return ""
	}
	return w
}

// parseDataName reports whether name, the last element of a data key, is
// a data object's: data-{write}-{n}.arrows, or data-{n}.arrows as
// writers before write IDs named them (write is then empty).
func parseDataName(name string) (write string, n int, ok bool) {
	rest, ok := strings.CutPrefix(name, "data-")
	if !ok {
		return "", 0, false
	}
	if rest, ok = strings.CutSuffix(rest, ".arrows"); !ok {
		return "", 0, false
	}
	if w, num, found := strings.Cut(rest, "-"); found {
		if len(w) != writeIDLength || strings.Trim(w, "0123456789abcdef") != "" {
			return "", 0, false
		}
		write, rest = w, num
	}
	i, ok := parseCanonical(rest)
	if !ok {
		return "", 0, false
	}
	return write, i, true
}

// DataKey is the key a manifest stores for data object n of a writer of
// an attempt: DataName, or with Spread its root-relative key under the
// attempt's shard prefix.
func (l Layout) DataKey(query string, stage int, worker, attempt, write string, n int) string {
	return l.spreadName(query, stage, worker+"/"+attempt, DataName(worker, attempt, write, n))
}

// spreadName is the key a manifest stores for the stage-relative name of
// a data object: name itself, or with Spread its root-relative key under
// the shard prefix that a hash of the stage and seed picks,
// ~{shard}/{query}/stage-{stage}/{name}. Objects of one seed (a writer's
// attempt, a combine task) share a shard.
func (l Layout) spreadName(query string, stage int, seed, name string) string {
	if l.Spread <= 1 {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(query + "/" + strconv.Itoa(stage) + "/" + seed))
	width := len(strconv.FormatUint(uint64(l.Spread-1), 16))
	shard := strconv.FormatUint(uint64(h.Sum32()%uint32(l.Spread)), 16)
	return spreadMark + strings.Repeat("0", width-len(shard)) + shard + "/" + query + "/stage-" + strconv.Itoa(stage) + "/" + name
}

// spreadMark begins the root-relative key of a spread data object (and
// the name of its shard folder): no query ID can contain it. The probes'
// folders begin with it too, so that no key of a query can be theirs.
const spreadMark = "~"

// The probes' folders under the root (see GuardProbeKey and
// ReadyProbePrefix).
const (
	guardProbeDir = spreadMark + "commit-guard/"
	readyProbeDir = spreadMark + "readyz/"
)

// GuardProbeIDLength is the length of a commit guard probe's ID: 16
// lowercase hex digits.
const GuardProbeIDLength = 16

// GuardProbeKey is the key of the commit guard's probe id (16 lowercase
// hex digits): {root}~commit-guard/{id}. A probe is written and deleted
// at once; gc removes one whose delete failed once it is stale.
func (l Layout) GuardProbeKey(id string) string { return l.Root() + guardProbeDir + id }

// ReadyProbePrefix is what a sidecar's readiness probe lists,
// {root}~readyz/: a folder that holds no key, so that the LIST costs the
// same whatever the bucket holds and succeeds exactly when the bucket
// exists and the credentials may list it. Nothing durashuffle writes
// goes there; gc removes a stale key that anything else left, which
// every probe would otherwise list again.
func (l Layout) ReadyProbePrefix() string { return l.Root() + readyProbeDir }

// SpreadPrefix is the prefix of every shard folder of spread data
// objects, {root}~ (the probes' folders begin with it too: ShardQueryPrefix
// tells them apart).
func (l Layout) SpreadPrefix() string { return l.Root() + spreadMark }

// ShardQueryPrefix takes a folder that a List of SpreadPrefix with
// delimiter "/" returned and, when it is a shard folder ({root}~{hex}/),
// returns the prefix of query's data objects in it.
func (l Layout) ShardQueryPrefix(dir, query string) (prefix string, ok bool) {
	rest, found := strings.CutPrefix(dir, l.Root())
	if !found {
		return "", false
	}
	shard, tail, ok := ParseSpread(rest)
	if !ok || tail != "" {
		return "", false
	}
	return l.Root() + shard + query + "/", true
}

// isGuardProbe says whether rel, a key relative to the root, is a commit
// guard probe.
func isGuardProbe(rel string) bool {
	id, ok := strings.CutPrefix(rel, guardProbeDir)
	if !ok || len(id) != GuardProbeIDLength {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isReadyProbe says whether rel, a key relative to the root, is under
// the readiness probe's folder.
func isReadyProbe(rel string) bool {
	name, ok := strings.CutPrefix(rel, readyProbeDir)
	return ok && name != ""
}

// ObjectKey resolves a manifest's object key: stage-relative, or
// root-relative for a spread data object.
func (l Layout) ObjectKey(query string, stage int, rel string) string {
	if strings.HasPrefix(rel, spreadMark) {
		return l.Root() + rel
	}
	return l.StagePrefix(query, stage) + rel
}

// checkObjectKey says whether a manifest's object key is one the layout
// makes for that query and stage: stage-relative, or under a shard
// prefix and then the stage's own folder, in a worker's or a combine
// plan's folder (so a manifest cannot name another stage's objects).
func checkObjectKey(query string, stage int, rel string) bool {
	if rel == "" || strings.Contains(rel, "..") {
		return false
	}
	rest, spread := strings.CutPrefix(rel, spreadMark)
	if !spread {
		return true
	}
	shard, tail, ok := strings.Cut(rest, "/")
	if !ok || shard == "" || strings.Trim(shard, "0123456789abcdef") != "" {
		return false
	}
	tail, ok = strings.CutPrefix(tail, query+"/stage-"+strconv.Itoa(stage)+"/")
	return ok && (strings.HasPrefix(tail, "worker-") || strings.HasPrefix(tail, CombinePrefix)) && !strings.Contains(tail, spreadMark)
}

// ParseSpread splits a key below the root into its shard folder
// ("~{hex}/") and the rest, when it is under one.
func ParseSpread(rest string) (shard, tail string, ok bool) {
	r, spread := strings.CutPrefix(rest, spreadMark)
	if !spread {
		return "", rest, false
	}
	hex, tail, found := strings.Cut(r, "/")
	if !found || hex == "" || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", rest, false
	}
	return spreadMark + hex + "/", tail, true
}

// IndexName is the stage-relative key of a sealed stage's index object.
// Every seal writes its own (sealID is random), so a seal that loses the
// race to the stage manifest deletes only what it wrote.
func IndexName(sealID string) string { return "index-" + sealID + ".bin" }

// parseIndexName reports whether a stage-relative name is an index
// object's.
func parseIndexName(name string) bool {
	id, ok := strings.CutPrefix(name, "index-")
	if !ok {
		return false
	}
	id, ok = strings.CutSuffix(id, ".bin")
	return ok && ValidateID("seal", id) == nil
}
