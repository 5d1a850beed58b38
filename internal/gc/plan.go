package gc

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// Plan is what a run of gc would remove, decided from one listing of the
// root and the manifests it found, before anything is removed: its
// Report is a dry run, and Apply carries it out.
type Plan struct {
	head   Report             // the report's header: clock, cutoffs, scanned, skipped
	aborts []store.UploadInfo // incomplete uploads old enough to abort
	expire []expiry           // expired results stages, by query and stage
	// manifests are worker and task manifests to delete (a combined
	// stage's first level, leftovers of combining), before orphans.
	manifests []store.ObjectInfo
	orphans   []store.ObjectInfo // unreferenced data, indexes and guard probes old enough to delete
	leftovers []leftovers        // of combining stages not combined, by stage
	planned   time.Time          // the wall clock when the plan was made
}

// applyNow is the plan's clock (head.Now) when Apply gets to it.
func (p *Plan) applyNow() time.Time { return p.head.Now.Add(time.Since(p.planned)) }

// expiry is an expired results stage and its keys in deletion order
// (expiryGroups): the combined level's manifest, the stage manifest,
// worker and task manifests, then data (and indexes).
type expiry struct {
	stage Stage
	keys  [4][]string
}

// NewPlan decides what Run removes under the layout's root: incomplete
// uploads older than OlderThan, expired results stages, and data objects
// no committed manifest references, older than OlderThan. It lists the
// uploads and then the whole root once and reads every manifest of every
// stage that has any (one GET each); it writes and deletes nothing.
// Keys that do not have the layout's shape are never in a plan.
func NewPlan(ctx context.Context, st store.Store, l manifest.Layout, o Options) (*Plan, error) {
	if o.OlderThan < 0 {
		return nil, fmt.Errorf("gc: older-than %v is negative", o.OlderThan)
	}
	if o.CombinedGrace < 0 {
		return nil, fmt.Errorf("gc: combined grace %v is negative", o.CombinedGrace)
	}
	if o.ResultsRetention < 0 {
		return nil, fmt.Errorf("gc: results retention %v is negative", o.ResultsRetention)
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	t := now()
	p := &Plan{head: Report{
		Prefix: l.Root(), Now: t,
		Cutoff: t.Add(-o.OlderThan), ResultsCutoff: t.Add(-o.ResultsRetention),
	}, planned: time.Now()}
	r := &p.head
	root := l.Root()
	var combinedCutoff time.Time // zero: first levels stay
	if o.CombinedGrace > 0 {
		combinedCutoff = t.Add(-o.CombinedGrace)
		r.CombinedCutoff = combinedCutoff
	}

	// Uploads before objects: an upload completed in between shows up as
	// an object of the listing below, or is left for the next run.
	ups, err := st.ListUploads(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("gc: list uploads under %q: %w", root, err)
	}
	objs, _, err := st.List(ctx, root, "")
	if err != nil {
		return nil, fmt.Errorf("gc: list objects under %q: %w", root, err)
	}

	stages := map[stageID]*stageKeys{}
	get := func(k manifest.Key) *stageKeys {
		id := stageID{k.Query, k.Stage}
		s := stages[id]
		if s == nil {
			s = &stageKeys{id: id, workers: map[string]store.ObjectInfo{}, uploads: map[string]time.Time{}}
			stages[id] = s
		}
		return s
	}
	// A combine plan's open uploads say its tasks are running.
	planUploads := map[stageID]map[string]time.Time{}
	for _, u := range ups {
		if !strings.HasPrefix(u.Key, root) {
			continue // the store filtered loosely; not ours to judge
		}
		r.Scanned.Uploads++
		if k := parseKey(l, u.Key).Kind; k != manifest.KeyData && k != manifest.KeyIndex {
			ck, plan, _, ok := parseCombineKey(l, u.Key)
			if !ok {
				r.Scanned.Foreign++
				continue
			}
			id := stageID{ck.Query, ck.Stage}
			if planUploads[id] == nil {
				planUploads[id] = map[string]time.Time{}
			}
			if u.Initiated.After(planUploads[id][plan]) {
				planUploads[id][plan] = u.Initiated
			}
		}
		if !u.Initiated.After(r.Cutoff) {
			p.aborts = append(p.aborts, u)
		}
	}
	for _, obj := range objs {
		if !strings.HasPrefix(obj.Key, root) {
			continue
		}
		r.Scanned.Objects++
		r.Scanned.Bytes += obj.Size
		k := parseKey(l, obj.Key)
		switch k.Kind {
		case manifest.KeyStageManifest:
			get(k).manifest = &obj
		case manifest.KeyWorkerManifest:
			get(k).workers[k.Worker] = obj
		case manifest.KeyData:
			s := get(k)
			s.data = append(s.data, dataKey{obj: obj, worker: k.Worker, attempt: k.Attempt})
		case manifest.KeyIndex:
			s := get(k)
			s.indexes = append(s.indexes, obj)
		case manifest.KeyGuardProbe, manifest.KeyReadyProbe:
			// A guard probe is a few bytes the commit guard writes and
			// deletes at once; one still here is one whose delete failed
			// (the store hung or the process died), and nothing reads it.
			// The readiness probe's folder should hold nothing: each probe
			// would list what is left there again.
			if !obj.LastModified.After(r.Cutoff) {
				p.orphans = append(p.orphans, obj)
			}
		default:
			if ck, plan, rest, ok := parseCombineKey(l, obj.Key); ok {
				s := get(ck)
				s.combine = append(s.combine, combineKey{obj: obj, plan: plan, rest: rest})
				continue
			}
			if ck, ok := parseCombinedManifest(l, obj.Key); ok {
				get(ck).combined = &obj
				continue
			}
			r.Scanned.Foreign++
		}
	}
	for id, plans := range planUploads {
		if s := stages[id]; s != nil {
			s.uploads = plans
		}
	}
	r.Scanned.Stages = len(stages)

	// A hold at combined.json older than this is a killed gc's.
	holdCutoff := r.Cutoff
	if c := t.Add(-minHoldAge); c.Before(holdCutoff) {
		holdCutoff = c
	}
	ordered := make([]*stageKeys, 0, len(stages))
	for _, s := range stages {
		ordered = append(ordered, s)
	}
	slices.SortFunc(ordered, func(a, b *stageKeys) int {
		return cmp.Or(strings.Compare(a.id.query, b.id.query), cmp.Compare(a.id.stage, b.id.stage))
	})
	verdicts := make([]verdict, len(ordered))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, s := range ordered {
		g.Go(func() (err error) {
			verdicts[i], err = judge(gctx, st, l, s, r.Cutoff, r.ResultsCutoff, combinedCutoff, holdCutoff)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, v := range verdicts {
		r.Skipped = append(r.Skipped, v.skipped...)
		p.manifests = append(p.manifests, v.manifests...)
		p.orphans = append(p.orphans, v.orphans...)
		if v.leftovers != nil {
			p.leftovers = append(p.leftovers, *v.leftovers)
		}
		if v.expire != nil {
			p.expire = append(p.expire, expiry{stage: *v.expire, keys: v.delete})
		}
	}
	return p, nil
}

// Report is what Apply would report, with DryRun set: the dry run.
func (p *Plan) Report() Report {
	r := p.start()
	r.DryRun = true
	for _, u := range p.aborts {
		r.aborted(u)
	}
	for _, x := range p.expire {
		r.expired(x.stage)
	}
	r.orphaned(p.manifests)
	r.orphaned(p.orphans)
	for _, lo := range p.leftovers {
		r.orphaned(lo.manifests)
		r.orphaned(lo.rest)
	}
	return r
}

// start is the report before any removal.
func (p *Plan) start() Report {
	r := p.head
	r.Uploads, r.Orphans, r.Stages = []Upload{}, []Object{}, []Stage{}
	return r
}

func (r *Report) aborted(u store.UploadInfo) {
	r.Uploads = append(r.Uploads, Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated})
	r.Totals.UploadsAborted++
}

func (r *Report) expired(s Stage) {
	r.Stages = append(r.Stages, s)
	r.Totals.StagesDeleted++
	r.Totals.ObjectsDeleted += s.Manifests + s.Objects
	r.Totals.BytesDeleted += s.Bytes
}

func (r *Report) orphaned(objs []store.ObjectInfo) {
	for _, obj := range objs {
		r.Orphans = append(r.Orphans, Object{Key: obj.Key, Size: obj.Size, LastModified: obj.LastModified})
		r.Totals.OrphanObjects++
		r.Totals.OrphanBytes += obj.Size
		r.Totals.ObjectsDeleted++
		r.Totals.BytesDeleted += obj.Size
	}
}

// parseKey is the layout's reading of key; a foreign key has kind
// KeyForeign.
func parseKey(l manifest.Layout, key string) manifest.Key {
	k, _ := l.Parse(key)
	return k
}
