package gc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// Options say what Run may remove.
type Options struct {
	// OlderThan protects work in progress: an incomplete upload is aborted
	// only if it was initiated, and an unreferenced data object deleted
	// only if it was last modified, at least this long before Now. It must
	// exceed the longest a writer takes from its first part to its commit,
	// or gc deletes the data of a writer that is about to commit (whose
	// manifest would then name missing objects). 0 takes everything that
	// is not committed, which is only safe when no writer is running.
	OlderThan time.Duration
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
	// ResultsRetention is how long a results stage (manifests with
	// Results set) is kept after its last manifest was written; then the
	// whole stage is deleted. 0 deletes results stages at once. Intermediate
	// stages are never expired: they live until their query is deleted.
	ResultsRetention time.Duration
	// Now is the clock (default time.Now). Ages compare Now with the
	// store's LastModified and Initiated times.
	Now func() time.Time
}

// Upload is an incomplete multipart upload.
type Upload struct {
	Key       string    `json:"key"`
	UploadID  string    `json:"upload_id"`
	Initiated time.Time `json:"initiated"`
}

// Object is a stored object.
type Object struct {
	Key          string    `json:"key"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"last_modified"`
}

// Stage is a stage gc deleted (expired results, or part of a deleted query).
type Stage struct {
	Query     string `json:"query"`
	Stage     int    `json:"stage"`
	Results   bool   `json:"results"`
	Sealed    bool   `json:"sealed"`
	Manifests int    `json:"manifests"` // stage and worker manifests, and stage indexes
	Objects   int    `json:"objects"`   // data objects
	Bytes     int64  `json:"bytes"`     // of manifests and data objects
	// CommittedAt is the newest manifest's LastModified.
	CommittedAt time.Time `json:"committed_at,omitzero"`
}

// Scanned counts what gc looked at.
type Scanned struct {
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
	Uploads int   `json:"uploads"`
	Stages  int   `json:"stages"`
	// Foreign keys and uploads under the prefix that do not have the
	// layout's shape; gc leaves them alone.
	Foreign int `json:"foreign"`
}

// Totals sum a Report.
type Totals struct {
	UploadsAborted int   `json:"uploads_aborted"`
	OrphanObjects  int   `json:"orphan_objects"`
	OrphanBytes    int64 `json:"orphan_bytes"`
	StagesDeleted  int   `json:"stages_deleted"`
	ObjectsDeleted int   `json:"objects_deleted"` // orphans and the stages' objects, manifests included
	BytesDeleted   int64 `json:"bytes_deleted"`
}

// Report lists what gc did, or with DryRun would do.
type Report struct {
	DryRun bool      `json:"dry_run"`
	Prefix string    `json:"prefix"`          // the layout's root
	Query  string    `json:"query,omitempty"` // DeleteQuery only
	Now    time.Time `json:"now"`
	// Cutoff: uploads initiated and orphans modified at or before it are
	// removed (Run only).
	Cutoff time.Time `json:"cutoff,omitzero"`
	// ResultsCutoff: results stages committed at or before it are
	// deleted (Run only).
	ResultsCutoff time.Time `json:"results_cutoff,omitzero"`
	Scanned       Scanned   `json:"scanned"`
	Uploads       []Upload  `json:"aborted_uploads"`
	Orphans       []Object  `json:"orphan_objects"`
	Stages        []Stage   `json:"deleted_stages"`
	// Skipped says what gc left alone because it could not tell whether
	// it is in use (e.g. a manifest that does not decode), and why.
	Skipped []string `json:"skipped,omitempty"`
	Totals  Totals   `json:"totals"`
}

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

// verdict is what Run decided for one stage.
type verdict struct {
	expire  *Stage
	delete  [3][]string // expired stage: stage manifest, worker manifests, data
	orphans []store.ObjectInfo
	skipped []string
}

// Run collects garbage under the layout's root, in this order: it aborts
// incomplete uploads older than OlderThan; deletes expired results stages
// (stage manifest first, then worker manifests, then data, so no manifest
// ever names a deleted object); and deletes data objects no committed
// manifest references, older than OlderThan. It reads every manifest of
// every stage that has any (one GET each) and lists the whole root once.
// Run is idempotent: an interrupted run is finished by running it again.
// Keys that do not have the layout's shape are never touched.
func Run(ctx context.Context, st store.Store, l manifest.Layout, o Options) (Report, error) {
	if o.OlderThan < 0 {
		return Report{}, fmt.Errorf("gc: older-than %v is negative", o.OlderThan)
	}
	if o.ResultsRetention < 0 {
		return Report{}, fmt.Errorf("gc: results retention %v is negative", o.ResultsRetention)
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	t := now()
	r := Report{
		DryRun: o.DryRun, Prefix: l.Root(), Now: t,
		Cutoff: t.Add(-o.OlderThan), ResultsCutoff: t.Add(-o.ResultsRetention),
		Uploads: []Upload{}, Orphans: []Object{}, Stages: []Stage{},
	}
	root := l.Root()

	// Uploads before objects: an upload completed in between shows up as
	// an object of the listing below, or is left for the next run.
	ups, err := st.ListUploads(ctx, root)
	if err != nil {
		return r, fmt.Errorf("gc: list uploads under %q: %w", root, err)
	}
	objs, _, err := st.List(ctx, root, "")
	if err != nil {
		return r, fmt.Errorf("gc: list objects under %q: %w", root, err)
	}

	var abort []store.UploadInfo
	for _, u := range ups {
		if !strings.HasPrefix(u.Key, root) {
			continue // the store filtered loosely; not ours to judge
		}
		r.Scanned.Uploads++
		if k := parseKey(l, u.Key).Kind; k != manifest.KeyData && k != manifest.KeyIndex {
			r.Scanned.Foreign++
			continue
		}
		if !u.Initiated.After(r.Cutoff) {
			abort = append(abort, u)
		}
	}

	stages := map[stageID]*stageKeys{}
	var probes []store.ObjectInfo
	get := func(k manifest.Key) *stageKeys {
		id := stageID{k.Query, k.Stage}
		s := stages[id]
		if s == nil {
			s = &stageKeys{id: id, workers: map[string]store.ObjectInfo{}}
			stages[id] = s
		}
		return s
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
		case manifest.KeyGuardProbe:
			// A probe is a few bytes the commit guard writes and deletes
			// at once; one still here is one whose delete failed (the
			// store hung or the process died), and nothing reads it.
			if !obj.LastModified.After(r.Cutoff) {
				probes = append(probes, obj)
			}
		default:
			r.Scanned.Foreign++
		}
	}
	r.Scanned.Stages = len(stages)

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
			verdicts[i], err = judge(gctx, st, l, s, r.Cutoff, r.ResultsCutoff)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return r, err
	}

	// Act: aborts, then expired stages, then orphans.
	for _, u := range abort {
		if !o.DryRun {
			if err := st.AbortMultipart(ctx, u.Key, u.UploadID); err != nil && !store.IsNotFound(err) {
				return r, fmt.Errorf("gc: abort upload %s of %s (initiated %s): %w", u.UploadID, u.Key, u.Initiated.Format(time.RFC3339), err)
			}
		}
		r.Uploads = append(r.Uploads, Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated})
		r.Totals.UploadsAborted++
	}
	orphans := probes
	for _, v := range verdicts {
		r.Skipped = append(r.Skipped, v.skipped...)
		orphans = append(orphans, v.orphans...)
		if v.expire == nil {
			continue
		}
		if !o.DryRun {
			for i, keys := range v.delete {
				if err := deleteKeys(ctx, st, keys); err != nil {
					return r, fmt.Errorf("gc: delete expired results %s stage %d (%s): %w", v.expire.Query, v.expire.Stage, [...]string{"stage manifest", "worker manifests", "data"}[i], err)
				}
			}
		}
		r.Stages = append(r.Stages, *v.expire)
		r.Totals.StagesDeleted++
		r.Totals.ObjectsDeleted += v.expire.Manifests + v.expire.Objects
		r.Totals.BytesDeleted += v.expire.Bytes
	}
	keys := make([]string, len(orphans))
	for i, obj := range orphans {
		keys[i] = obj.Key
		r.Orphans = append(r.Orphans, Object{Key: obj.Key, Size: obj.Size, LastModified: obj.LastModified})
		r.Totals.OrphanObjects++
		r.Totals.OrphanBytes += obj.Size
	}
	if !o.DryRun {
		if err := deleteKeys(ctx, st, keys); err != nil {
			return r, fmt.Errorf("gc: delete %d orphan objects: %w", len(keys), err)
		}
	}
	r.Totals.ObjectsDeleted += r.Totals.OrphanObjects
	r.Totals.BytesDeleted += r.Totals.OrphanBytes
	return r, nil
}

// parseKey is the layout's reading of key; a foreign key has kind
// KeyForeign.
func parseKey(l manifest.Layout, key string) manifest.Key {
	k, _ := l.Parse(key)
	return k
}

func deleteKeys(ctx context.Context, st store.Deleter, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return st.Delete(ctx, keys...)
}

// judge reads a stage's manifests and decides: expire it whole (a results
// stage committed at or before resultsCutoff), and which of its data
// objects no manifest references and are old enough to delete. A worker
// whose manifest cannot be decoded keeps all its data: gc cannot tell
// which attempt it committed.
func judge(ctx context.Context, st store.Store, l manifest.Layout, s *stageKeys, cutoff, resultsCutoff time.Time) (verdict, error) {
	var (
		v          verdict
		mu         sync.Mutex
		referenced = map[string]bool{}
		unknown    = map[string]bool{} // workers whose data must be kept
		results    bool
		committed  int  // manifests that decoded
		keepIndex  bool // the stage manifest did not decode: its index may be in use
	)
	add := func(w *manifest.Worker) {
		for _, o := range w.Objects {
			referenced[l.ObjectKey(s.id.query, s.id.stage, o.Key)] = true
		}
		results = results || w.Results
		committed++
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
					referenced[l.ObjectKey(s.id.query, s.id.stage, m.Index.Key)] = true
				}
				results = results || m.Results
				committed++
			case store.IsNotFound(err):
			case errors.Is(err, manifest.ErrCorrupt), errors.Is(err, manifest.ErrVersion):
				// Its workers' own manifests still say what they committed.
				keepIndex = true
				v.skipped = append(v.skipped, fmt.Sprintf("%s: %v", s.manifest.Key, err))
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
				unknown[worker] = true
				v.skipped = append(v.skipped, fmt.Sprintf("%s: %v; data of worker %s left alone", obj.Key, err, worker))
			default:
				return fmt.Errorf("gc: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return v, err
	}
	slices.Sort(v.skipped)

	var orphans []store.ObjectInfo
	var data []dataKey
	for _, d := range s.data {
		if referenced[d.obj.Key] {
			data = append(data, d)
			continue
		}
		if unknown[d.worker] || d.obj.LastModified.After(cutoff) {
			continue
		}
		orphans = append(orphans, d.obj)
	}
	// An index no stage manifest names is a lost or interrupted seal's
	// (a seal writes its index before the manifest that names it).
	var indexes []store.ObjectInfo
	for _, o := range s.indexes {
		switch {
		case referenced[o.Key]:
			indexes = append(indexes, o)
		case !keepIndex && !o.LastModified.After(cutoff):
			orphans = append(orphans, o)
		}
	}
	slices.SortFunc(orphans, func(a, b store.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	v.orphans = orphans

	committedAt := s.newest()
	if !results || committed == 0 || committedAt.After(resultsCutoff) {
		return v, nil
	}
	// An expired results stage goes whole: its referenced data, and its
	// old-enough orphans with it.
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
	return v, nil
}

// queryObjects lists a query's objects: under its prefix, and under
// every shard prefix ({root}~{shard}/) its spread data objects, whatever
// key_spread the writers had.
func queryObjects(ctx context.Context, st store.Lister, l manifest.Layout, query string) ([]store.ObjectInfo, error) {
	prefix := l.QueryPrefix(query)
	objs, _, err := st.List(ctx, prefix, "")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	_, shards, err := st.List(ctx, l.Root()+manifest.SpreadMark, "/")
	if err != nil {
		return nil, fmt.Errorf("list %s%s: %w", l.Root(), manifest.SpreadMark, err)
	}
	for _, sh := range shards {
		if _, _, ok := manifest.ParseSpread(strings.TrimPrefix(sh, l.Root())); !ok {
			continue
		}
		more, _, err := st.List(ctx, sh+query+"/", "")
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", sh+query+"/", err)
		}
		objs = append(objs, more...)
	}
	return objs, nil
}

// DeleteQuery deletes every object of a query and aborts its uploads: the
// stage manifests first, then the worker manifests (so readers stop
// finding the stages before any data goes), then everything else under
// the query's prefix (and its spread data objects), then the open multipart uploads there. Idempotent.
// Writers of the query still running fail or leave objects that a later
// DeleteQuery or Run removes.
func DeleteQuery(ctx context.Context, st store.Store, l manifest.Layout, query string) (Report, error) {
	if err := manifest.ValidateID("query", query); err != nil {
		return Report{}, err
	}
	r := Report{Prefix: l.Root(), Query: query, Now: time.Now(), Uploads: []Upload{}, Orphans: []Object{}, Stages: []Stage{}}
	prefix := l.QueryPrefix(query)
	objs, err := queryObjects(ctx, st, l, query)
	if err != nil {
		return r, fmt.Errorf("delete-query %s: %w", query, err)
	}
	var order [3][]string // stage manifests, worker manifests, the rest
	stages := map[int]*Stage{}
	for _, obj := range objs {
		if k := parseKey(l, obj.Key); !strings.HasPrefix(obj.Key, prefix) && (k.Kind != manifest.KeyData || k.Query != query) {
			continue
		}
		r.Scanned.Objects++
		r.Scanned.Bytes += obj.Size
		k := parseKey(l, obj.Key)
		var s *Stage
		if k.Kind != manifest.KeyForeign {
			if s = stages[k.Stage]; s == nil {
				s = &Stage{Query: query, Stage: k.Stage}
				stages[k.Stage] = s
			}
			s.Bytes += obj.Size
		} else {
			r.Scanned.Foreign++
		}
		switch k.Kind {
		case manifest.KeyStageManifest:
			order[0] = append(order[0], obj.Key)
			s.Sealed = true
			s.Manifests++
		case manifest.KeyWorkerManifest:
			order[1] = append(order[1], obj.Key)
			s.Manifests++
		case manifest.KeyData:
			order[2] = append(order[2], obj.Key)
			s.Objects++
		case manifest.KeyIndex:
			// After the stage manifest that names it.
			order[2] = append(order[2], obj.Key)
			s.Manifests++
		default:
			// Under the query's own prefix everything is the query's.
			order[2] = append(order[2], obj.Key)
		}
		if s != nil && obj.LastModified.After(s.CommittedAt) && k.Kind != manifest.KeyData {
			s.CommittedAt = obj.LastModified
		}
	}
	for i, keys := range order {
		if err := deleteKeys(ctx, st, keys); err != nil {
			return r, fmt.Errorf("delete-query %s: delete %d %s: %w", query, len(keys), [...]string{"stage manifests", "worker manifests", "data objects"}[i], err)
		}
		r.Totals.ObjectsDeleted += len(keys)
	}
	r.Totals.BytesDeleted = r.Scanned.Bytes
	r.Scanned.Stages = len(stages)
	for _, s := range stages {
		r.Stages = append(r.Stages, *s)
	}
	slices.SortFunc(r.Stages, func(a, b Stage) int { return cmp.Compare(a.Stage, b.Stage) })
	r.Totals.StagesDeleted = len(r.Stages)

	ups, err := st.ListUploads(ctx, prefix)
	if err != nil {
		return r, fmt.Errorf("delete-query %s: list uploads under %s: %w", query, prefix, err)
	}
	spread, err := st.ListUploads(ctx, l.Root()+manifest.SpreadMark)
	if err != nil {
		return r, fmt.Errorf("delete-query %s: list uploads under %s%s: %w", query, l.Root(), manifest.SpreadMark, err)
	}
	ups = append(ups, spread...)
	for _, u := range ups {
		if k := parseKey(l, u.Key); !strings.HasPrefix(u.Key, prefix) && (k.Kind != manifest.KeyData || k.Query != query) {
			continue
		}
		r.Scanned.Uploads++
		if err := st.AbortMultipart(ctx, u.Key, u.UploadID); err != nil && !store.IsNotFound(err) {
			return r, fmt.Errorf("delete-query %s: abort upload %s of %s: %w", query, u.UploadID, u.Key, err)
		}
		r.Uploads = append(r.Uploads, Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated})
		r.Totals.UploadsAborted++
	}
	return r, nil
}
