package gc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/gchold"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

type stageID struct {
	query string
	stage int
}

// stageKeys is what the listing found of one stage.
type stageKeys struct {
	id       stageID
	manifest *store.ObjectInfo           // stage manifest, if sealed
	combined *store.ObjectInfo           // the combined level's manifest (combine.CombinedName), if committed
	workers  map[string]store.ObjectInfo // worker manifests by worker
	data     []dataKey
	indexes  []store.ObjectInfo   // the stage manifest names at most one
	combine  []combineKey         // keys of combine plans (package combine)
	uploads  map[string]time.Time // plan: the newest open upload under it
}

// combineKey is a key under a combine plan's folder of the stage,
// {stage}/combine-{plan}/..., or a combined object spread under a shard.
type combineKey struct {
	obj  store.ObjectInfo
	plan string
	rest string // below the plan's folder
}

// parseCombineKey reads a key of a combine plan:
// {root}{query}/stage-{n}/combine-{plan}/{rest}, plan 16 lower-case hex
// digits as package combine makes them, or a combined object spread
// over key_spread prefixes (combine.TaskDataKey),
// {root}~{shard}/{query}/stage-{n}/combine-{plan}/task-{i}/data-{write}.arrows.
func parseCombineKey(l manifest.Layout, key string) (manifest.Key, string, string, bool) {
	rest, ok := strings.CutPrefix(key, l.Root())
	if !ok {
		return manifest.Key{}, "", "", false
	}
	_, rest, spread := manifest.ParseSpread(rest)
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) != 4 {
		return manifest.Key{}, "", "", false
	}
	k, ok := l.Parse(l.Root() + parts[0] + "/" + parts[1] + "/manifest.json")
	if !ok || k.Kind != manifest.KeyStageManifest {
		return manifest.Key{}, "", "", false
	}
	plan, ok := strings.CutPrefix(parts[2], manifest.CombinePrefix)
	if !ok || len(plan) != 16 || strings.Trim(plan, "0123456789abcdef") != "" || parts[3] == "" {
		return manifest.Key{}, "", "", false
	}
	if spread && !isTaskData(parts[3]) {
		return manifest.Key{}, "", "", false
	}
	return k, plan, parts[3], true
}

// isTaskData says whether rest, below a plan's folder, is a combined
// object's name: task-{n}/data-{write}.arrows.
func isTaskData(rest string) bool {
	task, name, ok := strings.Cut(rest, "/")
	return ok && strings.HasPrefix(task, "task-") && strings.HasPrefix(name, "data-") && strings.HasSuffix(name, ".arrows") && !strings.Contains(name, "/")
}

// isTaskManifest says whether rest, below a plan's folder, is a task
// manifest's name: task-{n}.bin.
func isTaskManifest(rest string) bool {
	return strings.HasPrefix(rest, "task-") && strings.HasSuffix(rest, ".bin") && !strings.Contains(rest, "/")
}

// parseCombinedManifest reads the key of a combined level's manifest,
// {root}{query}/stage-{n}/combined.json.
func parseCombinedManifest(l manifest.Layout, key string) (manifest.Key, bool) {
	dir, ok := strings.CutSuffix(key, "/"+combine.CombinedName)
	if !ok {
		return manifest.Key{}, false
	}
	k, ok := l.Parse(dir + "/manifest.json")
	return k, ok && k.Kind == manifest.KeyStageManifest
}

type dataKey struct {
	obj             store.ObjectInfo
	worker, attempt string
}

// newest is the latest LastModified of the stage's manifests.
func (s *stageKeys) newest() time.Time {
	var t time.Time
	if s.manifest != nil {
		t = s.manifest.LastModified
	}
	if s.combined != nil && s.combined.LastModified.After(t) {
		t = s.combined.LastModified
	}
	for _, o := range s.workers {
		if o.LastModified.After(t) {
			t = o.LastModified
		}
	}
	return t
}

// verdict is what judge decided for one stage.
type verdict struct {
	expire    *Stage
	delete    [4][]string        // expired stage: in the order of expiryGroups
	manifests []store.ObjectInfo // orphan worker and task manifests: deleted before the orphans
	orphans   []store.ObjectInfo
	leftovers *leftovers
	skipped   []string
}

// leftovers are the keys of combining a stage that is not combined
// (combineLeftovers), deleted apart from the rest, while gc holds the
// stage's combined.json (see apply): its task manifests first, then its
// objects, indexes and group records.
type leftovers struct {
	combined string
	plans    []string // whose keys these are
	// dirs are the plans' folders, listed again under the hold: a plan
	// with a key newer than cutoff there is being combined again, and
	// its keys stay.
	dirs      map[string]string
	cutoff    time.Time
	layout    manifest.Layout
	manifests []store.ObjectInfo
	rest      []store.ObjectInfo
	// takeover is a hold at combined.json older than the cutoff, left by
	// a gc that was killed: this gc replaces it with its own.
	takeover []byte
}

// splitManifests takes the worker and task manifests out of objs, so
// that they are deleted before the objects they name: a delete that
// stops midway leaves objects no manifest names, not a manifest naming
// deleted objects (a task manifest left so would be taken as committed
// by a rerun of its plan).
func splitManifests(l manifest.Layout, objs []store.ObjectInfo) (manifests, rest []store.ObjectInfo) {
	for _, o := range objs {
		if parseKey(l, o.Key).Kind == manifest.KeyWorkerManifest {
			manifests = append(manifests, o)
		} else if _, _, r, ok := parseCombineKey(l, o.Key); ok && isTaskManifest(r) {
			manifests = append(manifests, o)
		} else {
			rest = append(rest, o)
		}
	}
	return manifests, rest
}

// expiryGroups name an expired stage's keys in deletion order: what
// names other keys goes before what it names. The combined level's
// manifest goes first, so that no combined seal finishing meanwhile
// writes the stage manifest again from it.
var expiryGroups = [4]string{"combined level's manifest", "stage manifest", "worker and task manifests", "data and indexes"}

// judge reads a stage's manifests and decides: expire it whole (a results
// stage committed at or before resultsCutoff), and which of its data
// objects no manifest references and are old enough to delete. A worker
// whose manifest cannot be decoded keeps all its data: gc cannot tell
// which attempt it committed.
//
// An expired results stage that is combined goes with both levels: the
// combined level's manifest, task manifests, objects and index too.
//
// A combined stage (its stage manifest names a combined level) whose
// combined seal is at or before combinedCutoff (not zero) loses its
// first level: every data object and worker manifest of the stage, and
// its unreferenced indexes, listed with the orphans, worker manifests
// first.
//
// A stage that is not combined (no combined level's manifest, and a
// stage manifest that is absent or the first level's) loses the keys of
// every combine plan whose newest key and open upload are at or before
// cutoff: tasks killed, or a plan whose seal never came (see
// combineLeftovers).
func judge(ctx context.Context, st store.Reader, l manifest.Layout, s *stageKeys, cutoff, resultsCutoff, combinedCutoff, holdCutoff time.Time) (verdict, error) {
	var v verdict
	r, err := loadRefs(ctx, st, l, s)
	if err != nil {
		return v, err
	}
	if err := r.loadHold(ctx, st, s); err != nil {
		return v, err
	}
	v.skipped = r.skipped
	combineOrphans := r.combineOrphans(s, cutoff)
	stale := r.hold != nil && !r.hold.HeldAt.After(holdCutoff)
	if r.hold != nil && !stale {
		v.skipped = append(v.skipped, fmt.Sprintf("%s: %v; this stage's combining left over is that gc's", s.combined.Key, r.hold))
	}
	if left, plans := r.combineLeftovers(s, cutoff, stale); len(left) > 0 || stale {
		v.leftovers = &leftovers{combined: s.combinedKey(l), plans: plans, dirs: map[string]string{}, cutoff: cutoff, layout: l}
		for _, plan := range plans {
			v.leftovers.dirs[plan] = l.ObjectKey(s.id.query, s.id.stage, manifest.PlanDir(plan))
		}
		if stale {
			v.leftovers.takeover = r.holdBytes
		}
		v.leftovers.manifests, v.leftovers.rest = splitManifests(l, left)
	}
	committedAt := s.newest()
	expired := r.results && r.committed > 0 && !committedAt.After(resultsCutoff)
	if !expired && !r.combinedAt.IsZero() && !combinedCutoff.IsZero() && !r.combinedAt.After(combinedCutoff) {
		v.manifests, v.orphans = splitManifests(l, append(firstLevel(s, r.referenced), combineOrphans...))
		return v, nil
	}

	var orphans []store.ObjectInfo
	var data []dataKey
	for _, d := range s.data {
		if r.referenced[d.obj.Key] {
			data = append(data, d)
			continue
		}
		if r.unknown[d.worker] || d.obj.LastModified.After(cutoff) {
			continue
		}
		orphans = append(orphans, d.obj)
	}
	// An index no stage manifest names is a lost or interrupted seal's
	// (a seal writes its index before the manifest that names it).
	var indexes []store.ObjectInfo
	for _, o := range s.indexes {
		switch {
		case r.referenced[o.Key]:
			indexes = append(indexes, o)
		case !r.keepIndex && !o.LastModified.After(cutoff):
			orphans = append(orphans, o)
		}
	}
	slices.SortFunc(orphans, func(a, b store.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	v.manifests, v.orphans = splitManifests(l, append(orphans, combineOrphans...))

	if expired {
		expire(&v, s, data, indexes, r, committedAt)
	}
	return v, nil
}

// refs is what a stage's manifests say: the objects they reference, the
// workers whose manifests did not decode (their data is kept), and what
// kind of stage it is.
type refs struct {
	referenced map[string]bool
	unknown    map[string]bool
	skipped    []string
	results    bool
	committed  int       // manifests that decoded
	keepIndex  bool      // the stage manifest did not decode: its index may be in use
	combinedAt time.Time // the combined seal, for a combined stage
	// hold is gc's hold at combined.json (package gchold), if that is
	// what it is, and holdBytes its bytes.
	hold      *gchold.Hold
	holdBytes []byte
}

// minHoldAge is the youngest hold gc takes over, whatever its
// --older-than: a gc run holds a stage for seconds.
const minHoldAge = 15 * time.Minute

// loadRefs reads the stage manifest and every worker manifest of s,
// eight at a time.
func loadRefs(ctx context.Context, st store.Reader, l manifest.Layout, s *stageKeys) (*refs, error) {
	r := &refs{referenced: map[string]bool{}, unknown: map[string]bool{}}
	var mu sync.Mutex
	add := func(w *manifest.Worker) {
		for _, o := range w.Objects {
			r.referenced[l.ObjectKey(s.id.query, s.id.stage, o.Key)] = true
		}
		r.results = r.results || w.Results
		r.committed++
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	if s.manifest != nil {
		g.Go(func() error {
			m, err := manifest.LoadStageManifest(gctx, st, l, s.id.query, s.id.stage)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				for i := range m.Workers {
					add(&m.Workers[i])
				}
				if m.Index != nil {
					r.referenced[l.ObjectKey(s.id.query, s.id.stage, m.Index.Key)] = true
				}
				if combine.IsCombined(m) {
					r.combinedAt = m.SealedAt
				}
				r.results = r.results || m.Results
				r.committed++
			case store.IsNotFound(err):
			case errors.Is(err, manifest.ErrCorrupt), errors.Is(err, manifest.ErrVersion):
				// Its workers' own manifests still say what they committed.
				r.keepIndex = true
				r.skipped = append(r.skipped, fmt.Sprintf("%s: %v", s.manifest.Key, err))
			default:
				return fmt.Errorf("gc: %w", err)
			}
			return nil
		})
	}
	for worker, obj := range s.workers {
		g.Go(func() error {
			w, err := manifest.LoadWorker(gctx, st, l, s.id.query, s.id.stage, worker)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				add(w)
			case store.IsNotFound(err):
			case errors.Is(err, manifest.ErrCorrupt), errors.Is(err, manifest.ErrVersion):
				r.unknown[worker] = true
				r.skipped = append(r.skipped, fmt.Sprintf("%s: %v; data of worker %s left alone", obj.Key, err, worker))
			default:
				return fmt.Errorf("gc: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	slices.Sort(r.skipped)
	return r, nil
}

// loadHold reads combined.json of a stage that is not combined (its
// stage manifest names no combined level): a level committed but not
// published, or gc's hold (r.hold). A combined stage's is its level's.
func (r *refs) loadHold(ctx context.Context, st store.Reader, s *stageKeys) error {
	if s.combined == nil || !r.combinedAt.IsZero() {
		return nil
	}
	b, err := readHold(ctx, st, s.combined.Key)
	if store.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gc: read %s: %w", s.combined.Key, err)
	}
	if h, ok := gchold.Parse(b); ok {
		r.hold, r.holdBytes = &h, b
	}
	return nil
}

// combineOrphans are, once the stage is combined, the keys of every
// other combine plan (tasks of a plan that lost the seal) and, of the
// winner's, objects and indexes its manifest does not name (attempts
// that lost, or were killed), once old enough. The winner's task
// manifests stay: they are its record.
func (r *refs) combineOrphans(s *stageKeys, cutoff time.Time) []store.ObjectInfo {
	if r.combinedAt.IsZero() {
		return nil
	}
	var out []store.ObjectInfo
	winner := winningPlan(s, r.referenced)
	for _, c := range s.combine {
		stale := !c.obj.LastModified.After(cutoff)
		switch {
		case !stale || winner == "":
		case c.plan != winner:
			out = append(out, c.obj)
		case !r.referenced[c.obj.Key] && (strings.HasSuffix(c.rest, ".arrows") || strings.HasPrefix(c.rest, "index-")):
			out = append(out, c.obj)
		}
	}
	return out
}

// expire deletes an expired results stage whole: its manifests, its
// referenced data and indexes (its old-enough orphans are in v already)
// and, when it is combined, the combined level: its manifest, the
// winning plan's task manifests, and the objects and index the stage
// manifest names. Keys of the stage's plans that no manifest names and
// that are not old enough yet are left; once the stage manifest is gone
// they are leftovers of a stage that is not combined (combineLeftovers).
func expire(v *verdict, s *stageKeys, data []dataKey, indexes []store.ObjectInfo, r *refs, committedAt time.Time) {
	x := &Stage{Query: s.id.query, Stage: s.id.stage, Results: true, Sealed: s.manifest != nil, CommittedAt: committedAt}
	add := func(group int, obj store.ObjectInfo, object bool) {
		v.delete[group] = append(v.delete[group], obj.Key)
		if object {
			x.Objects++
		} else {
			x.Manifests++
		}
		x.Bytes += obj.Size
	}
	if s.combined != nil {
		add(0, *s.combined, false)
	}
	if s.manifest != nil {
		add(1, *s.manifest, false)
	}
	workers := make([]string, 0, len(s.workers))
	for w := range s.workers {
		workers = append(workers, w)
	}
	slices.Sort(workers)
	for _, w := range workers {
		add(2, s.workers[w], false)
	}
	for _, d := range data {
		add(3, d.obj, true)
	}
	for _, o := range indexes {
		add(3, o, false)
	}
	if !r.combinedAt.IsZero() {
		winner := winningPlan(s, r.referenced)
		for _, c := range s.combine {
			switch {
			case c.plan != winner:
			case isTaskManifest(c.rest):
				add(2, c.obj, false)
			case r.referenced[c.obj.Key]:
				add(3, c.obj, isTaskData(c.rest))
			}
		}
	}
	v.expire = x
}

// combineLeftovers are the keys of combining a stage that is not
// combined, and their plans: of every plan whose newest key (task
// manifests, task objects, indexes of a seal that did not commit) and
// newest open upload are at or before cutoff, all of its keys. The age
// is the plan's, not each key's: a plan with a task that committed or an
// upload that began after cutoff is still being combined, and its older
// task manifests and objects are what its seal will name. A stage whose
// combined level's manifest exists (a combined seal that has not yet
// written the stage manifest), or a hold of another gc not older than
// cutoff (staleHold false), or whose stage manifest does not decode, has
// no leftovers: gc cannot tell what its level names, or another gc is
// deleting them.
func (r *refs) combineLeftovers(s *stageKeys, cutoff time.Time, staleHold bool) ([]store.ObjectInfo, []string) {
	if !r.combinedAt.IsZero() || s.combined != nil && !staleHold || r.keepIndex || len(s.combine) == 0 {
		return nil, nil
	}
	newest := map[string]time.Time{}
	for plan, t := range s.uploads {
		newest[plan] = t
	}
	for _, c := range s.combine {
		if c.obj.LastModified.After(newest[c.plan]) {
			newest[c.plan] = c.obj.LastModified
		}
	}
	var out []store.ObjectInfo
	var plans []string
	for _, c := range s.combine {
		if !newest[c.plan].After(cutoff) {
			out = append(out, c.obj)
			plans = append(plans, c.plan)
		}
	}
	slices.Sort(plans)
	return out, slices.Compact(plans)
}

// combinedKey is the stage's combined.json.
func (s *stageKeys) combinedKey(l manifest.Layout) string {
	return l.StagePrefix(s.id.query, s.id.stage) + combine.CombinedName
}

// readHold reads the first gchold.ReadBytes of key: a hold whole, or
// the first bytes of a level's manifest.
func readHold(ctx context.Context, st store.Reader, key string) ([]byte, error) {
	body, err := st.GetRange(ctx, key, 0, gchold.ReadBytes)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return io.ReadAll(body)
}

// firstLevel lists the first level of a combined stage for deletion:
// its worker manifests, then its data objects and the indexes no stage
// manifest names (the combined level's objects are outside the layout's
// grammar and never listed here).
func firstLevel(s *stageKeys, referenced map[string]bool) []store.ObjectInfo {
	var out []store.ObjectInfo
	for _, o := range s.workers {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b store.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	var rest []store.ObjectInfo
	for _, d := range s.data {
		rest = append(rest, d.obj)
	}
	for _, o := range s.indexes {
		if !referenced[o.Key] {
			rest = append(rest, o)
		}
	}
	slices.SortFunc(rest, func(a, b store.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return append(out, rest...)
}

// winningPlan is the plan whose index the stage manifest names (one of
// s.combine's keys is referenced), or "" when none is.
func winningPlan(s *stageKeys, referenced map[string]bool) string {
	for _, c := range s.combine {
		if referenced[c.obj.Key] {
			return c.plan
		}
	}
	return ""
}
