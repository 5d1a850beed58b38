package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/combine"
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
	workers  map[string]store.ObjectInfo // worker manifests by worker
	data     []dataKey
	indexes  []store.ObjectInfo // the stage manifest names at most one
	combine  []combineKey       // keys of combine plans (package combine)
}

// combineKey is a key under a combine plan's folder of the stage,
// {stage}/combine-{plan}/...
type combineKey struct {
	obj  store.ObjectInfo
	plan string
	rest string // below the plan's folder
}

// parseCombineKey reads a key of a combine plan:
// {root}{query}/stage-{n}/combine-{plan}/{rest}, plan 16 lower-case hex
// digits as package combine makes them.
func parseCombineKey(l manifest.Layout, key string) (manifest.Key, string, string, bool) {
	rest, ok := strings.CutPrefix(key, l.Root())
	if !ok {
		return manifest.Key{}, "", "", false
	}
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) != 4 {
		return manifest.Key{}, "", "", false
	}
	k, ok := l.Parse(l.Root() + parts[0] + "/" + parts[1] + "/manifest.json")
	if !ok || k.Kind != manifest.KeyStageManifest {
		return manifest.Key{}, "", "", false
	}
	plan, ok := strings.CutPrefix(parts[2], "combine-")
	if !ok || len(plan) != 16 || strings.Trim(plan, "0123456789abcdef") != "" || parts[3] == "" {
		return manifest.Key{}, "", "", false
	}
	return k, plan, parts[3], true
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
	for _, o := range s.workers {
		if o.LastModified.After(t) {
			t = o.LastModified
		}
	}
	return t
}

// verdict is what judge decided for one stage.
type verdict struct {
	expire  *Stage
	delete  [3][]string // expired stage: stage manifest, worker manifests, data
	orphans []store.ObjectInfo
	skipped []string
}

// judge reads a stage's manifests and decides: expire it whole (a results
// stage committed at or before resultsCutoff), and which of its data
// objects no manifest references and are old enough to delete. A worker
// whose manifest cannot be decoded keeps all its data: gc cannot tell
// which attempt it committed.
//
// A combined stage (its stage manifest names a combined level) whose
// combined seal is at or before combinedCutoff (not zero) loses its
// first level: every data object and worker manifest of the stage, and
// its unreferenced indexes, listed with the orphans, worker manifests
// first.
func judge(ctx context.Context, st store.Reader, l manifest.Layout, s *stageKeys, cutoff, resultsCutoff, combinedCutoff time.Time) (verdict, error) {
	var v verdict
	r, err := loadRefs(ctx, st, l, s)
	if err != nil {
		return v, err
	}
	v.skipped = r.skipped
	combineOrphans := r.combineOrphans(s, cutoff)
	if !r.combinedAt.IsZero() && !combinedCutoff.IsZero() && !r.combinedAt.After(combinedCutoff) {
		v.orphans = append(firstLevel(s, r.referenced), combineOrphans...)
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
	v.orphans = append(orphans, combineOrphans...)

	if committedAt := s.newest(); r.results && r.committed > 0 && !committedAt.After(resultsCutoff) {
		expire(&v, s, data, indexes, committedAt)
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
}

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
// referenced data and indexes (its old-enough orphans are in v already).
func expire(v *verdict, s *stageKeys, data []dataKey, indexes []store.ObjectInfo, committedAt time.Time) {
	x := &Stage{Query: s.id.query, Stage: s.id.stage, Results: true, Sealed: s.manifest != nil, CommittedAt: committedAt}
	if s.manifest != nil {
		v.delete[0] = []string{s.manifest.Key}
		x.Manifests++
		x.Bytes += s.manifest.Size
	}
	workers := make([]string, 0, len(s.workers))
	for w := range s.workers {
		workers = append(workers, w)
	}
	slices.Sort(workers)
	for _, w := range workers {
		obj := s.workers[w]
		v.delete[1] = append(v.delete[1], obj.Key)
		x.Manifests++
		x.Bytes += obj.Size
	}
	for _, d := range data {
		v.delete[2] = append(v.delete[2], d.obj.Key)
		x.Objects++
		x.Bytes += d.obj.Size
	}
	for _, o := range indexes {
		v.delete[2] = append(v.delete[2], o.Key)
		x.Manifests++
		x.Bytes += o.Size
	}
	v.expire = x
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
