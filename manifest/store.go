package manifest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/store"
)

// readAll GETs a whole object, refusing more than MaxManifestBytes.
func readAll(ctx context.Context, st store.Reader, key string) ([]byte, error) {
	body, err := st.GetRange(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrCorrupt, key, MaxManifestBytes)
	}
	return b, nil
}

// Commit writes a worker manifest with If-None-Match: *, the commit point
// of the worker's output, and returns the manifest that stands: w, or an
// earlier commit of the same attempt with the same content. It sorts
// w.Frames by partition (stably: write order within a partition stays),
// as the manifest stores them.
//
// When the key is taken (412), the manifest there decides:
//   - w itself (the same data objects: an earlier try of this put
//     succeeded and its answer was lost): w stands;
//   - the same attempt with the same content (objects of equal sizes and
//     checksums, equal frames and schema: a task rerun under the same
//     attempt ID after a lost answer): that manifest stands and is
//     returned; w's own objects are unreferenced and the caller deletes them;
//   - anything else: ErrAlreadyCommitted, naming the worker and both
//     attempts. The committed output is unchanged.
//
// When the outcome cannot be learnt (the put failed in a way that may
// have stored it, and the manifest cannot be read back), the error wraps
// ErrCommitUnknown: the caller must not delete w's objects, which the
// manifest may refer to (gc removes them if it does not).
func Commit(ctx context.Context, st store.Store, l Layout, w *Worker) (*Worker, error) {
	w.FormatVersion, w.Kind = FormatVersion, KindWorker
	w.Totals = w.Sum()
	if err := w.Check("worker manifest"); err != nil {
		return nil, err
	}
	b, err := w.Encode()
	if err != nil {
		return nil, err
	}
	key := l.WorkerManifestKey(w.Query, w.Stage, w.Worker)
	perr := st.Put(ctx, key, b, store.PutOptions{IfNoneMatch: true, ContentType: "application/octet-stream"})
	if perr == nil {
		return w, nil
	}
	taken := errors.Is(perr, store.ErrPreconditionFailed)
	if !taken && !mayHaveStored(ctx, perr) {
		return nil, fmt.Errorf("commit manifest %s: %w", key, perr)
	}
	rctx := ctx
	if ctx.Err() != nil {
		// The caller gave up mid-put: learn the outcome all the same, so
		// that the caller neither deletes committed objects nor keeps
		// uncommitted ones.
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
		defer cancel()
	}
	won, rerr := LoadWorker(rctx, st, l, w.Query, w.Stage, w.Worker)
	switch {
	case rerr == nil:
	case !taken && store.IsNotFound(rerr):
		return nil, fmt.Errorf("commit manifest %s: %w", key, perr) // it was not stored
	default:
		return nil, fmt.Errorf("%w: worker %s of %s stage %d, attempt %s: the manifest put %s, and reading %s back failed: %w",
			ErrCommitUnknown, w.Worker, w.Query, w.Stage, w.Attempt, putOutcome(taken, perr), key, rerr)
	}
	switch {
	case sameObjects(won, w):
		return w, nil
	case won.Attempt == w.Attempt && sameContent(won, w):
		return won, nil
	case won.Attempt == w.Attempt:
		return nil, fmt.Errorf("%w: worker %s of %s stage %d: attempt %s is already committed (%d rows, %d bytes in %d objects), and this writer of the same attempt wrote other content (%d rows, %d bytes); "+
			"the committed output is unchanged: give every run of a task its own attempt ID",
			ErrAlreadyCommitted, w.Worker, w.Query, w.Stage, w.Attempt, won.Totals.Rows, won.Totals.BytesStored, len(won.Objects), w.Totals.Rows, w.Totals.BytesStored)
	}
	return nil, fmt.Errorf("%w: worker %s of %s stage %d: attempt %s won, attempt %s lost", ErrAlreadyCommitted, w.Worker, w.Query, w.Stage, won.Attempt, w.Attempt)
}

// readBackTimeout bounds the read-back of a worker manifest whose put the
// caller cut off.
const readBackTimeout = 30 * time.Second

// mayHaveStored says whether a failed put may have been stored all the
// same: any failure but the store's own refusal before storing (a 4xx
// other than a timeout) or a caller that gave up before the put was sent.
func mayHaveStored(ctx context.Context, err error) bool {
	if ctx.Err() != nil && !store.IsTransient(err) {
		return true // cut off mid-request: it may have landed
	}
	return store.IsTransient(err)
}

func putOutcome(taken bool, err error) string {
	if taken {
		return "found the key taken"
	}
	return fmt.Sprintf("failed (%v)", err)
}

// sameObjects says whether two manifests name the same data objects: one
// writer's output.
func sameObjects(a, b *Worker) bool {
	return a.Attempt == b.Attempt && slices.EqualFunc(a.Objects, b.Objects, func(x, y Object) bool { return x == y })
}

// sameContent says whether two writers of an attempt stored the same
// bytes: data objects of equal sizes and checksums, the same frames, the
// same schema and partitions.
func sameContent(a, b *Worker) bool {
	return a.Partitions == b.Partitions && bytes.Equal(a.Schema, b.Schema) &&
		slices.EqualFunc(a.Objects, b.Objects, func(x, y Object) bool { return x.Size == y.Size && x.CRC32C == y.CRC32C }) &&
		slices.Equal(a.Frames, b.Frames)
}

// LoadWorker GETs one worker manifest.
func LoadWorker(ctx context.Context, st store.Reader, l Layout, query string, stage int, worker string) (*Worker, error) {
	key := l.WorkerManifestKey(query, stage, worker)
	b, err := readAll(ctx, st, key)
	if err != nil {
		return nil, err
	}
	return DecodeWorker(key, b)
}

func sameAttempts(a, b *Stage) bool {
	if len(a.Workers) != len(b.Workers) {
		return false
	}
	for i := range a.Workers {
		if a.Workers[i].Worker != b.Workers[i].Worker || a.Workers[i].Attempt != b.Workers[i].Attempt {
			return false
		}
	}
	return true
}

// merge builds an unsealed stage from whole worker manifests, checking
// they agree. Its workers keep their frames in memory.
func merge(query string, stage int, ws []*Worker) (*Stage, error) {
	s := &Stage{FormatVersion: FormatVersion, Kind: kindStage, Query: query, Stage: stage}
	slices.SortFunc(ws, func(a, b *Worker) int { return compareWorkers(a.Worker, b.Worker) })
	for i, w := range ws {
		if i == 0 {
			s.Partitions, s.Schema, s.Results = w.Partitions, w.Schema, w.Results
		} else {
			if w.Partitions != s.Partitions {
				return nil, fmt.Errorf("%w: %s stage %d: worker %s has %d partitions, worker %s has %d", ErrCorrupt, query, stage, w.Worker, w.Partitions, ws[0].Worker, s.Partitions)
			}
			if string(w.Schema) != string(s.Schema) {
				return nil, fmt.Errorf("%w: %s stage %d: worker %s wrote a different schema than worker %s", ErrCorrupt, query, stage, w.Worker, ws[0].Worker)
			}
		}
		s.Workers = append(s.Workers, *w)
		s.Totals.add(w.Sum())
	}
	return s, nil
}

// compareWorkers orders numeric IDs numerically ("2" before "10"), then
// others by string.
func compareWorkers(a, b string) int {
	if len(a) != len(b) && isDigits(a) && isDigits(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// LoadStageManifest GETs the sealed stage manifest.
func LoadStageManifest(ctx context.Context, st store.Reader, l Layout, query string, stage int) (*Stage, error) {
	key := l.StageManifestKey(query, stage)
	b, err := readAll(ctx, st, key)
	if err != nil {
		return nil, err
	}
	return DecodeStage(key, b)
}

// LoadStage opens a stage: one GET of the stage manifest when it is
// sealed (its frames stay in the index object, read by Frames per
// partition range); otherwise a LIST of the stage and a GET per worker
// manifest, whose frames are then held in memory.
func LoadStage(ctx context.Context, st store.Store, l Layout, query string, stage int) (*Stage, error) {
	if err := ValidateID("query", query); err != nil {
		return nil, err
	}
	if err := ValidateStage(stage); err != nil {
		return nil, err
	}
	s, err := LoadStageManifest(ctx, st, l, query, stage)
	if err == nil || !store.IsNotFound(err) {
		return s, err
	}
	workers, err := listWorkers(ctx, st, l, query, stage)
	if err != nil {
		return nil, err
	}
	if len(workers) == 0 {
		return nil, fmt.Errorf("%w: %s stage %d has no stage manifest and no worker manifests under %s", ErrStageNotFound, query, stage, l.StagePrefix(query, stage))
	}
	ws := make([]*Worker, len(workers))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, id := range workers {
		g.Go(func() (err error) {
			defer safe.Recover(&err, "load of the manifest of worker %s of %s stage %d", id, query, stage)
			ws[i], err = LoadWorker(gctx, st, l, query, stage, id)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return merge(query, stage, ws)
}

// listWorkers returns the workers of a stage that have committed.
func listWorkers(ctx context.Context, st store.Lister, l Layout, query string, stage int) ([]string, error) {
	prefix := l.StagePrefix(query, stage)
	_, dirs, err := st.List(ctx, prefix+"worker-", "/")
	if err != nil {
		return nil, err
	}
	// Folders are worker-W/; a worker has committed when its manifest is
	// there, which the GET that follows finds out. List the manifests
	// directly to avoid a GET per uncommitted worker.
	var out []string
	for _, d := range dirs {
		objs, _, err := st.List(ctx, d, "/")
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if k, ok := l.Parse(o.Key); ok && k.Kind == KeyWorkerManifest && k.Query == query && k.Stage == stage {
				out = append(out, k.Worker)
			}
		}
	}
	slices.SortFunc(out, compareWorkers)
	return out, nil
}

// StageInfo describes a stage found by ListStages.
type StageInfo struct {
	Query   string
	Stage   int
	Sealed  bool
	Workers int // committed workers (for an unsealed stage)
}

// ListQueries returns the queries under the layout's root.
func ListQueries(ctx context.Context, st store.Lister, l Layout) ([]string, error) {
	_, dirs, err := st.List(ctx, l.Root(), "/")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range dirs {
		q := strings.TrimSuffix(strings.TrimPrefix(d, l.Root()), "/")
		if ValidateID("query", q) == nil {
			out = append(out, q)
		}
	}
	return out, nil
}

// ListStages returns the committed stages of a query: sealed ones and
// those with at least one worker manifest.
func ListStages(ctx context.Context, st store.Lister, l Layout, query string) ([]StageInfo, error) {
	if err := ValidateID("query", query); err != nil {
		return nil, err
	}
	qp := l.QueryPrefix(query)
	_, dirs, err := st.List(ctx, qp, "/")
	if err != nil {
		return nil, err
	}
	var out []StageInfo
	for _, d := range dirs {
		// A folder is a stage's when its manifest's key would parse.
		k, ok := l.Parse(d + "manifest.json")
		if !ok || k.Kind != KeyStageManifest || k.Query != query {
			continue
		}
		n := k.Stage
		objs, _, err := st.List(ctx, d, "/")
		if err != nil {
			return nil, err
		}
		info := StageInfo{Query: query, Stage: n}
		for _, o := range objs {
			if o.Key == l.StageManifestKey(query, n) {
				info.Sealed = true
			}
		}
		ws, err := listWorkers(ctx, st, l, query, n)
		if err != nil {
			return nil, err
		}
		info.Workers = len(ws)
		if info.Sealed || info.Workers > 0 {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b StageInfo) int { return a.Stage - b.Stage })
	return out, nil
}
