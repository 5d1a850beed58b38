package combine

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// overlap is a plan made before the map stage ends: its groups are runs
// of workers in commit order, each fixed by a group record committed
// under the plan with If-None-Match the first time a process forms it.
type overlap struct {
	workers int // the stage's workers, N: the groups' sizes sum to it

	mu      sync.Mutex
	records map[int]*groupRecord       // groups this process has read or formed
	members map[int][]*manifest.Worker // their workers' manifests, frames included
	flights map[flight]chan struct{}   // steps under way (see lead); closed when done
	// grouped is the group of every worker of a record in records.
	grouped map[string]int
	// done is the tasks this process found committed, by group: once
	// all of a group's are, its members are dropped, so that a process
	// running a plan's tasks group by group holds the frames of the
	// groups under way, not of every group it has run.
	done map[int]map[int]bool
	// handed is the committed worker manifests the engine handed over
	// (Stage.Committed) that no group here has taken yet, and order
	// their workers in the order handed.
	handed map[string]*manifest.Worker
	order  []string
}

func newOverlap(workers int) *overlap {
	return &overlap{workers: workers, records: map[int]*groupRecord{}, members: map[int][]*manifest.Worker{},
		flights: map[flight]chan struct{}{}, grouped: map[string]int{}, done: map[int]map[int]bool{}, handed: map[string]*manifest.Worker{}}
}

// flight is a step that one goroutine of the process takes for a group
// at a time: forming (or reading) its record, loading its workers'
// manifests.
type flight struct {
	step string
	g    int
}

// lead makes the caller the one taking step for group g, returning the
// end to call when it is done; or, when another goroutine is taking it,
// waits for that one to end and returns no end: the caller looks again
// for what it made. A leader never waits for another step's leader, so
// leaders cannot wait for each other.
func (o *overlap) lead(ctx context.Context, step string, g int) (end func(), err error) {
	k := flight{step, g}
	o.mu.Lock()
	ch := o.flights[k]
	if ch == nil {
		ch = make(chan struct{})
		o.flights[k] = ch
		o.mu.Unlock()
		return func() {
			o.mu.Lock()
			delete(o.flights, k)
			o.mu.Unlock()
			close(ch)
		}, nil
	}
	o.mu.Unlock()
	select {
	case <-ch:
		return nil, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// groupedAt is the attempt at which a group known here holds worker id.
// Under o.mu.
func (o *overlap) groupedAt(id string) (string, bool) {
	g, ok := o.grouped[id]
	if !ok {
		return "", false
	}
	for _, m := range o.records[g].Workers {
		if m.Worker == id {
			return m.Attempt, true
		}
	}
	return "", false
}

// take drops the handed manifests of workers ids: a group holds them
// now, or is done with them. Under o.mu.
func (o *overlap) take(ids []string) {
	for _, id := range ids {
		delete(o.handed, id)
	}
	o.order = slices.DeleteFunc(o.order, func(id string) bool { return o.handed[id] == nil })
}

// groupRecord is group g's workers and the attempts that committed,
// stored as JSON at combine-{plan}/group-{g}.json: the commit point at
// which every process, and every attempt of the group's tasks, agrees
// on what the group holds.
type groupRecord struct {
	Plan    string        `json:"plan"`
	Group   int           `json:"group"`
	Workers []groupMember `json:"workers"`
}

type groupMember struct {
	Worker  string `json:"worker"`
	Attempt string `json:"attempt"`
}

// digest is the hex SHA-256 of the record's plan, group, workers and
// attempts: what a task of the group records it read
// (manifest.Worker.GroupSHA256).
func (r *groupRecord) digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %d\n", r.Plan, r.Group)
	for _, m := range r.Workers {
		fmt.Fprintf(h, "%s %s\n", m.Worker, m.Attempt)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (r *groupRecord) ids() []string {
	out := make([]string, len(r.Workers))
	for i, m := range r.Workers {
		out[i] = m.Worker
	}
	return out
}

// groupName is group g's record, relative to the stage prefix.
func groupName(planID string, g int) string {
	return manifest.PlanDir(planID) + "group-" + strconv.Itoa(g) + ".json"
}

// Expect is what an engine that knows only the shape of a stage expects
// of it, for Options.Expected: workers writing one object each of an
// equal share of bytes, spread evenly over partitions.
func Expect(workers, partitions int, bytes int64) *Input {
	in := &Input{Partitions: partitions}
	for range max(workers, 0) {
		in.Workers = append(in.Workers, WorkerInput{Objects: []int64{bytes / int64(workers)}})
	}
	return in
}

// openOverlap is Open of a stage whose writers may still be running
// (Options.Expected): see Options.Expected.
func openOverlap(ctx context.Context, st store.Store, l manifest.Layout, query string, stage int, in Input, o Options) (*Stage, error) {
	in.Query, in.Stage = query, stage
	o.Expected, o.expected = nil, true
	if in.Partitions < 1 || len(in.Workers) == 0 {
		return nil, fmt.Errorf("%w: combine %s stage %d while it is written: %d partitions and %d workers; both must be at least 1", ErrInvalidPlan, in.Query, in.Stage, in.Partitions, len(in.Workers))
	}
	if in.PartitionBytes == nil {
		var total int64
		for _, w := range in.Workers {
			for _, b := range w.Objects {
				total += b
			}
		}
		in.PartitionBytes = make([]int64, in.Partitions)
		for p := range in.PartitionBytes {
			in.PartitionBytes[p] = total / int64(in.Partitions)
		}
	}
	in.IndexKey = fmt.Sprintf("commit order of %d workers", len(in.Workers))
	s := &Stage{st: st, l: l, query: in.Query, stage: in.Stage,
		overlap: newOverlap(len(in.Workers))}
	c, err := loadCombined(ctx, st, l, in.Query, in.Stage)
	if err != nil {
		return nil, err
	}
	if c != nil {
		s.combined = c
		return s, nil
	}
	if s.plan, err = MakePlan(in, o); err != nil {
		return nil, err
	}
	if len(s.plan.Groups) < 2 && o.Groups == 0 && len(in.Workers) >= 2 {
		// One group would start its tasks after the last commit: two
		// let the first group's run while the second's writers write.
		o.Groups = 2
		if s.plan, err = MakePlan(in, o); err != nil {
			return nil, err
		}
	}
	s.plan.Overlap = true
	wb, _ := workerBytes(in)
	s.plan.Predict = predict(in, s.plan, wb)
	return s, nil
}

// FormGroup fixes group g of a plan made with Options.Expected and returns its
// workers. Given workers (the engine's: the next ones to commit), it
// checks that each has committed (a worker whose manifest was handed
// over, Committed, is taken as committed) and that they are as many as
// the group; given none, it takes the next workers to commit after those
// of groups 0..g-1, in the order they were handed over when this process
// holds enough of them, else in the order their manifests were stored
// (forming those groups first when no process has). The first process to form a group
// commits its record with If-None-Match; the others get that record,
// and an engine naming other workers than the committed record gets
// ErrGroupConflict. A group whose workers have not all committed is
// ErrGroupNotReady, naming how many are missing. Safe for concurrent
// use; idempotent.
func (s *Stage) FormGroup(ctx context.Context, g int, workers []string) ([]string, error) {
	if s.overlap == nil || s.plan == nil {
		return nil, fmt.Errorf("%w: combine %s stage %d: groups are formed only by a plan made while the stage is written (Options.Expected)", ErrInvalidPlan, s.query, s.stage)
	}
	if g < 0 || g >= len(s.plan.Groups) {
		return nil, fmt.Errorf("%w: combine %s stage %d: group %d outside the plan's %d groups", ErrInvalidPlan, s.query, s.stage, g, len(s.plan.Groups))
	}
	var rec *groupRecord
	var err error
	if len(workers) == 0 {
		rec, err = s.record(ctx, g, true)
	} else {
		rec, err = s.formNamed(ctx, g, workers)
	}
	if err != nil {
		return nil, err
	}
	return rec.ids(), nil
}

// record returns group g's record: this process's, the committed one,
// or (form) one formed from the listing of committed workers.
func (s *Stage) record(ctx context.Context, g int, form bool) (*groupRecord, error) {
	o := s.overlap
	for {
		o.mu.Lock()
		rec := o.records[g]
		o.mu.Unlock()
		if rec != nil {
			return rec, nil
		}
		if !form {
			return s.loadGroup(ctx, g)
		}
		// The tasks of a group that start together read or form its
		// record once.
		end, err := o.lead(ctx, "record", g)
		if err != nil {
			return nil, err
		}
		if end == nil {
			continue
		}
		rec, err = s.loadGroup(ctx, g)
		if err == nil && rec == nil {
			rec, err = s.formListed(ctx, g)
		}
		end()
		return rec, err
	}
}

// loadGroup GETs group g's record; nil when no process has formed it.
func (s *Stage) loadGroup(ctx context.Context, g int) (*groupRecord, error) {
	key := s.l.ObjectKey(s.query, s.stage, groupName(s.plan.ID, g))
	b, err := readAll(ctx, s.st, key, manifest.MaxManifestBytes)
	if store.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("combine group %d of %s stage %d: %w", g, s.query, s.stage, err)
	}
	var rec groupRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%w: %s is not a group record: %w", manifest.ErrCorrupt, key, err)
	}
	if rec.Plan != s.plan.ID || rec.Group != g || len(rec.Workers) != s.plan.Groups[g].Len() {
		return nil, fmt.Errorf("%w: %s is group %d of plan %s with %d workers, want group %d of plan %s with %d",
			manifest.ErrCorrupt, key, rec.Group, rec.Plan, len(rec.Workers), g, s.plan.ID, s.plan.Groups[g].Len())
	}
	s.keep(g, &rec, nil)
	return &rec, nil
}

func (s *Stage) keep(g int, rec *groupRecord, ws []*manifest.Worker) {
	o := s.overlap
	o.mu.Lock()
	defer o.mu.Unlock()
	if old := o.records[g]; old != nil && !slices.Equal(old.Workers, rec.Workers) {
		// The record was formed anew (gc deleted the plan's).
		delete(o.members, g)
		delete(o.done, g)
	}
	o.records[g] = rec
	for _, m := range rec.Workers {
		o.grouped[m.Worker] = g
	}
	if ws != nil {
		s.hold(g, rec, ws)
	}
}

// hold keeps ws as group g's workers, rec's, until the group's tasks here
// are done; the handed manifests among them are the group's now. Under
// o.mu.
func (s *Stage) hold(g int, rec *groupRecord, ws []*manifest.Worker) {
	o := s.overlap
	if len(o.done[g]) < len(s.plan.Buckets) {
		o.members[g] = ws
	}
	o.take(rec.ids())
}

// Committed hands the stage the manifests of workers that committed, as
// the engine got them (Writer.Commit's result, or a worker manifest it
// decoded from what a remote writer reported), so that the group each
// joins forms, and its tasks run, without a GET of it: the last group
// forms the moment its last worker commits. A group formed here from
// the listing (FormGroup with no workers named) takes the next workers
// handed, in the order handed, when this process holds enough of them,
// with no LIST of the committed workers; otherwise it takes them from
// the listing, and reads those not handed.
//
// Each must be a worker manifest of this stage, frames included, of one
// of the plan's workers 0..N-1; none is taken unless all are. A worker
// handed again at its attempt changes nothing; at another attempt than
// it was handed at, or than a group known here records, it is
// ErrGroupConflict. A manifest is held until a group formed or run here
// takes it, and then until that group's tasks here are done. The
// attempt a group records is checked against the first level's at the
// combined seal, as for a group formed from the store. Plan with
// Options.CommitsHanded for the prediction to count neither the GETs
// nor the LISTs.
func (s *Stage) Committed(ws ...*manifest.Worker) error {
	if s.overlap == nil || s.plan == nil {
		return fmt.Errorf("%w: combine %s stage %d: commits are handed only to a plan made while the stage is written (Options.Expected)", ErrInvalidPlan, s.query, s.stage)
	}
	o := s.overlap
	what := func(w *manifest.Worker) string {
		return fmt.Sprintf("combine %s stage %d: committed manifest of worker %s", s.query, s.stage, w.Worker)
	}
	for _, w := range ws {
		if w == nil {
			return fmt.Errorf("%w: combine %s stage %d: a nil committed manifest", ErrInvalidPlan, s.query, s.stage)
		}
		if err := w.Check(what(w)); err != nil {
			return err
		}
		switch {
		case w.Query != s.query || w.Stage != s.stage:
			return fmt.Errorf("%w: %s is of %s stage %d", ErrInvalidPlan, what(w), w.Query, w.Stage)
		case !s.expected(w.Worker):
			return fmt.Errorf("%w: %s: worker %q is not one of the plan's workers 0..%d", ErrInvalidPlan, what(w), w.Worker, o.workers-1)
		case w.Partitions != s.plan.Partitions:
			return fmt.Errorf("%w: %s: %d partitions, the plan has %d", ErrInvalidPlan, what(w), w.Partitions, s.plan.Partitions)
		case int64(len(w.Frames)) != int64(w.Totals.Frames) || w.Sum() != w.Totals:
			sum := w.Sum()
			return fmt.Errorf("%w: %s holds %d frames of %d rows and %d bytes, its totals say %d, %d and %d: hand the manifest Commit returned, frames included",
				ErrInvalidPlan, what(w), len(w.Frames), sum.Rows, sum.BytesStored, w.Totals.Frames, w.Totals.Rows, w.Totals.BytesStored)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	at := make(map[string]string, len(ws))
	for _, w := range ws {
		if a, ok := o.groupedAt(w.Worker); ok && a != w.Attempt {
			return fmt.Errorf("%w: %s: handed at attempt %s, and a group holds it at attempt %s", ErrGroupConflict, what(w), w.Attempt, a)
		}
		if old := o.handed[w.Worker]; old != nil && old.Attempt != w.Attempt {
			return fmt.Errorf("%w: %s: handed at attempt %s, and before at attempt %s", ErrGroupConflict, what(w), w.Attempt, old.Attempt)
		}
		if a, ok := at[w.Worker]; ok && a != w.Attempt {
			return fmt.Errorf("%w: %s: handed at attempts %s and %s at once", ErrGroupConflict, what(w), a, w.Attempt)
		}
		at[w.Worker] = w.Attempt
	}
	for _, w := range ws {
		if g, ok := o.grouped[w.Worker]; o.handed[w.Worker] != nil || ok && (o.members[g] != nil || len(o.done[g]) == len(s.plan.Buckets)) {
			continue // held already, or its group's manifests are here or done with
		}
		o.handed[w.Worker] = w
		o.order = append(o.order, w.Worker)
	}
	return nil
}

// formNamed forms group g from the workers the engine names.
func (s *Stage) formNamed(ctx context.Context, g int, workers []string) (*groupRecord, error) {
	what := fmt.Sprintf("combine group %d of %s stage %d (plan %s)", g, s.query, s.stage, s.plan.ID)
	if want := s.plan.Groups[g].Len(); len(workers) != want {
		return nil, fmt.Errorf("%w: %s holds %d workers, %d named", ErrInvalidPlan, what, want, len(workers))
	}
	if d := firstDuplicate(workers); d != "" {
		return nil, fmt.Errorf("%w: %s: worker %s named twice", ErrGroupConflict, what, d)
	}
	for _, id := range workers {
		if !s.expected(id) {
			return nil, fmt.Errorf("%w: %s: worker %q is not one of the plan's workers 0..%d", ErrInvalidPlan, what, id, s.overlap.workers-1)
		}
	}
	conflict := func(rec *groupRecord) error {
		if have, named := slices.Sorted(slices.Values(rec.ids())), slices.Sorted(slices.Values(workers)); slices.Equal(have, named) {
			return nil
		}
		return fmt.Errorf("%w: %s was formed with workers %s, and now named with %s", ErrGroupConflict, what, strings.Join(rec.ids(), ","), strings.Join(workers, ","))
	}
	if rec, err := s.record(ctx, g, false); err != nil || rec != nil {
		if err == nil {
			err = conflict(rec)
		}
		return rec, err
	}
	// A worker another group holds would be in two groups: the plan
	// could never seal.
	held, _, err := s.formedGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	for _, id := range workers {
		if k, ok := held[id]; ok && k != g {
			return nil, fmt.Errorf("%w: %s: worker %s is in group %d already", ErrGroupConflict, what, id, k)
		}
	}
	ws, err := s.loadWorkers(ctx, what, workers)
	if err != nil {
		return nil, err
	}
	rec, err := s.commitGroup(ctx, what, g, ws)
	if err == nil {
		err = conflict(rec) // another process formed it first, with other workers
	}
	return rec, err
}

// formedGroups LISTs the plan's group records and returns the groups
// formed, and their workers by the group that holds them.
func (s *Stage) formedGroups(ctx context.Context) (held map[string]int, formed map[int]*groupRecord, err error) {
	prefix := s.l.ObjectKey(s.query, s.stage, manifest.PlanDir(s.plan.ID)+"group-")
	objs, _, err := s.st.List(ctx, prefix, "/")
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	// The records not read yet, 16 at a time (a process that forms
	// group g may not have read the g before it).
	var ks []int
	for _, o := range objs {
		k, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(o.Key, prefix), ".json"))
		if err == nil && k >= 0 && k < len(s.plan.Groups) {
			ks = append(ks, k)
		}
	}
	recs, err := s.records(ctx, ks, false)
	if err != nil {
		return nil, nil, err
	}
	held, formed = map[string]int{}, map[int]*groupRecord{}
	for i, rec := range recs {
		if rec == nil {
			continue
		}
		formed[ks[i]] = rec
		for _, id := range rec.ids() {
			held[id] = ks[i]
		}
	}
	return held, formed, nil
}

// formListed forms group g, and the groups before it that no process
// has formed, from the committed workers in commit order.
func (s *Stage) formListed(ctx context.Context, g int) (*groupRecord, error) {
	what := fmt.Sprintf("combine group %d of %s stage %d (plan %s)", g, s.query, s.stage, s.plan.ID)
	// The workers of every formed group are taken, a later one's too
	// (an engine may name a later group first).
	held, formed, err := s.formedGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if rec := formed[g]; rec != nil {
		return rec, nil // formed by another process meanwhile
	}
	taken := map[string]bool{}
	for id := range held {
		taken[id] = true
	}
	var earlier []int
	for k := range g {
		if formed[k] == nil {
			earlier = append(earlier, k)
		}
	}
	ks, need := append(earlier, g), 0
	for _, k := range ks {
		need += s.plan.Groups[k].Len()
	}
	// The workers handed over (Committed), in the order handed, when
	// they are enough; else the listing, in commit order.
	var free []string
	s.overlap.mu.Lock()
	for _, id := range s.overlap.order {
		if !taken[id] {
			free = append(free, id)
		}
	}
	s.overlap.mu.Unlock()
	if len(free) < need {
		committed, err := s.commitOrder(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		free = free[:0]
		for _, id := range committed {
			if !taken[id] {
				free = append(free, id)
			}
		}
	}
	var rec *groupRecord
	for _, k := range ks {
		n := s.plan.Groups[k].Len()
		if len(free) < n {
			return nil, fmt.Errorf("%w: %s: group %d needs %d more workers to commit; %d of them have (after the %d workers of formed groups)",
				ErrGroupNotReady, what, k, n, len(free), len(taken))
		}
		kwhat := fmt.Sprintf("combine group %d of %s stage %d (plan %s)", k, s.query, s.stage, s.plan.ID)
		ws, err := s.loadWorkers(ctx, kwhat, free[:n])
		if err != nil {
			return nil, err
		}
		if rec, err = s.commitGroup(ctx, kwhat, k, ws); err != nil {
			return nil, err
		}
		// The record that stands may be another process's: the workers it
		// took are not free.
		used := map[string]bool{}
		for _, id := range rec.ids() {
			used[id] = true
		}
		free = slices.DeleteFunc(free, func(id string) bool { return used[id] })
	}
	return rec, nil
}

// commitOrder lists the stage's committed workers in the order their
// manifests were stored (then by ID).
func (s *Stage) commitOrder(ctx context.Context) ([]string, error) {
	prefix := s.l.StagePrefix(s.query, s.stage) + "worker-"
	objs, _, err := s.st.List(ctx, prefix, "")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	type committed struct {
		id string
		at store.ObjectInfo
	}
	var cs []committed
	for _, o := range objs {
		// Only the expected workers, 0..N-1, as the first level's seal
		// names them: a stray worker would take a group's place.
		if k, ok := s.l.Parse(o.Key); ok && k.Kind == manifest.KeyWorkerManifest && k.Query == s.query && k.Stage == s.stage && s.expected(k.Worker) {
			cs = append(cs, committed{k.Worker, o})
		}
	}
	slices.SortFunc(cs, func(a, b committed) int {
		return cmp.Or(a.at.LastModified.Compare(b.at.LastModified), compareIDs(a.id, b.id))
	})
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.id
	}
	return out, nil
}

// records returns groups ks's records, 16 at a time: this process's
// or the store's (record), or the store's alone (fresh, loadGroup); nil
// for a group not formed.
func (s *Stage) records(ctx context.Context, ks []int, fresh bool) ([]*groupRecord, error) {
	recs := make([]*groupRecord, len(ks))
	eg, gctx := errgroup.WithContext(ctx)
	eg.SetLimit(16)
	for i, k := range ks {
		eg.Go(func() (err error) {
			if fresh {
				recs[i], err = s.loadGroup(gctx, k)
			} else {
				recs[i], err = s.record(gctx, k, false)
			}
			return err
		})
	}
	return recs, eg.Wait()
}

// loadWorkers returns the workers' manifests, frames included: those
// the engine handed over (Committed) as they are, the others by GET.
func (s *Stage) loadWorkers(ctx context.Context, what string, ids []string) ([]*manifest.Worker, error) {
	ws := make([]*manifest.Worker, len(ids))
	eg, gctx := errgroup.WithContext(ctx)
	eg.SetLimit(16)
	for i, id := range ids {
		s.overlap.mu.Lock()
		ws[i] = s.overlap.handed[id]
		s.overlap.mu.Unlock()
		if ws[i] != nil {
			continue
		}
		eg.Go(func() (err error) {
			defer safe.Recover(&err, "%s: load of worker %s", what, id)
			w, err := manifest.LoadWorker(gctx, s.st, s.l, s.query, s.stage, id)
			switch {
			case store.IsNotFound(err):
				return fmt.Errorf("%w: %s: worker %s has not committed (no %s)", ErrGroupNotReady, what, id, s.l.WorkerManifestKey(s.query, s.stage, id))
			case err != nil:
				return fmt.Errorf("%s: %w", what, err)
			case w.Partitions != s.plan.Partitions:
				return fmt.Errorf("%w: %s: worker %s wrote %d partitions, the plan has %d", ErrInvalidPlan, what, id, w.Partitions, s.plan.Partitions)
			}
			ws[i] = w
			return nil
		})
	}
	return ws, eg.Wait()
}

// commitGroup puts group g's record of ws with If-None-Match and returns
// the record that stands: this one, or the one another process
// committed first.
func (s *Stage) commitGroup(ctx context.Context, what string, g int, ws []*manifest.Worker) (*groupRecord, error) {
	rec := &groupRecord{Plan: s.plan.ID, Group: g}
	for _, w := range ws {
		rec.Workers = append(rec.Workers, groupMember{w.Worker, w.Attempt})
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	key := s.l.ObjectKey(s.query, s.stage, groupName(s.plan.ID, g))
	perr := s.st.Put(ctx, key, b, store.PutOptions{IfNoneMatch: true, ContentType: "application/json"})
	if perr == nil {
		s.keep(g, rec, ws)
		return rec, nil
	}
	if !errors.Is(perr, store.ErrPreconditionFailed) && !store.IsTransient(perr) {
		return nil, fmt.Errorf("%s: commit %s: %w", what, key, perr)
	}
	// Taken, or a put whose outcome is unknown: the record that stands
	// decides.
	got, err := s.loadGroup(ctx, g)
	if err != nil {
		return nil, err
	}
	if got == nil {
		return nil, fmt.Errorf("%s: commit %s: %w", what, key, perr)
	}
	if slices.Equal(got.Workers, rec.Workers) {
		s.keep(g, got, ws)
	}
	return got, nil
}

// members returns group g's record and its workers' manifests, forming
// the group from the listing when no process has. The tasks of a group
// that start together load its manifests once: one loads, the others
// wait for it.
func (s *Stage) members(ctx context.Context, g int) (*groupRecord, []*manifest.Worker, error) {
	rec, err := s.record(ctx, g, true)
	if err != nil {
		return nil, nil, err
	}
	o := s.overlap
	for {
		// The record and its workers are read together: a record formed
		// anew (gc deleted the plan's) drops the workers of the old one.
		o.mu.Lock()
		rec = cmp.Or(o.records[g], rec)
		ws := o.members[g]
		o.mu.Unlock()
		if ws != nil {
			return rec, ws, nil
		}
		end, err := o.lead(ctx, "members", g)
		if err != nil {
			return nil, nil, err
		}
		if end != nil {
			defer end()
			break // this task loads them
		}
	}
	what := fmt.Sprintf("combine group %d of %s stage %d (plan %s)", g, s.query, s.stage, s.plan.ID)
	ws, err := s.loadWorkers(ctx, what, rec.ids())
	if err != nil {
		return nil, nil, err
	}
	// A worker manifest is committed with If-None-Match: the attempt the
	// group recorded is the worker's for good.
	for i, w := range ws {
		if w.Attempt == rec.Workers[i].Attempt {
			continue
		}
		o.mu.Lock()
		handed := o.handed[w.Worker] == w
		if handed {
			o.take([]string{w.Worker}) // the next try reads the store's
		}
		o.mu.Unlock()
		if handed {
			return nil, nil, fmt.Errorf("%w: %s recorded worker %s's attempt %s, and the manifest handed over (Committed) is attempt %s: dropped",
				ErrGroupConflict, what, w.Worker, rec.Workers[i].Attempt, w.Attempt)
		}
		return nil, nil, fmt.Errorf("%w: %s recorded worker %s's attempt %s, and its manifest is attempt %s", manifest.ErrCorrupt, what, w.Worker, rec.Workers[i].Attempt, w.Attempt)
	}
	o.mu.Lock()
	if o.records[g] == rec { // unless the record was formed anew meanwhile
		s.hold(g, rec, ws)
	}
	o.mu.Unlock()
	return rec, ws, nil
}

// taskDone records that task n is committed; once every task of its
// group is, the group's worker manifests are dropped (a later task of
// the group, after a gc, loads them again).
func (s *Stage) taskDone(n int) {
	o := s.overlap
	if o == nil {
		return
	}
	g, _ := s.plan.Task(n)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done[g] == nil {
		o.done[g] = map[int]bool{}
	}
	o.done[g][n] = true
	if len(o.done[g]) == len(s.plan.Buckets) {
		delete(o.members, g)
		if rec := o.records[g]; rec != nil {
			o.take(rec.ids())
		}
	}
}

// groupLevel is a group's workers as a level of their own, their frames
// in memory, for a task to read as it reads a sealed stage's.
func (s *Stage) groupLevel(ws []*manifest.Worker) *manifest.Stage {
	lv := &manifest.Stage{Query: s.query, Stage: s.stage, Partitions: s.plan.Partitions, Schema: ws[0].Schema, Results: ws[0].Results}
	for _, w := range ws {
		lv.Workers = append(lv.Workers, *w)
	}
	return lv
}

// checkGroups is the combined seal's check of an overlapped plan
// against the sealed first level: every worker of the level in exactly
// one group, with the attempt the level names, and no other worker. It
// reads the group records from the store, not this process's, and
// returns them for the check of the tasks (checkTaskGroups).
func (s *Stage) checkGroups(ctx context.Context) ([]*groupRecord, error) {
	what := fmt.Sprintf("seal of combined %s stage %d (plan %s)", s.query, s.stage, s.plan.ID)
	all := make([]int, len(s.plan.Groups))
	for g := range all {
		all[g] = g
	}
	recs, err := s.records(ctx, all, true)
	if err != nil {
		return nil, err
	}
	level := map[string]string{}
	for _, w := range s.level1.Workers {
		level[w.Worker] = w.Attempt
	}
	in := map[string]int{}
	var unformed []string
	for g, rec := range recs {
		if rec == nil {
			unformed = append(unformed, strconv.Itoa(g))
			continue
		}
		for _, m := range rec.Workers {
			attempt, ok := level[m.Worker]
			switch prev, twice := in[m.Worker]; {
			case twice:
				return nil, fmt.Errorf("%w: %s: worker %s is in groups %d and %d", ErrGroupConflict, what, m.Worker, prev, g)
			case !ok:
				return nil, fmt.Errorf("%w: %s: worker %s of group %d is not in the sealed first level (%d workers)", ErrGroupConflict, what, m.Worker, g, len(s.level1.Workers))
			case attempt != m.Attempt:
				return nil, fmt.Errorf("%w: %s: group %d read worker %s's attempt %s, the first level names attempt %s", ErrGroupConflict, what, g, m.Worker, m.Attempt, attempt)
			}
			in[m.Worker] = g
		}
	}
	if len(unformed) > 0 {
		return nil, fmt.Errorf("%w: %s: %d of %d groups have not formed: %s", ErrMissingTasks, what, len(unformed), len(recs), strings.Join(unformed, ", "))
	}
	for _, w := range s.level1.Workers {
		if _, ok := in[w.Worker]; !ok {
			return nil, fmt.Errorf("%w: %s: worker %s of the first level is in no group", ErrGroupConflict, what, w.Worker)
		}
	}
	return recs, nil
}

// checkTaskGroups is the combined seal's check that every task of an
// overlapped plan was made from its group as recs record it: a task
// made from a record gc deleted, and formed anew since with other
// workers, holds other rows than the record says, whatever the totals.
func (s *Stage) checkTaskGroups(c *manifest.Stage, recs []*groupRecord) error {
	byID := map[string]*manifest.Worker{}
	for i := range c.Workers {
		byID[c.Workers[i].Worker] = &c.Workers[i]
	}
	for n := range s.plan.Tasks() {
		g, j := s.plan.Task(n)
		w := byID[s.plan.taskID(n)]
		if w != nil && w.GroupSHA256 == "" {
			continue // written before tasks recorded their group: the checks of the groups and totals stand
		}
		if w == nil || w.GroupSHA256 != recs[g].digest() {
			return fmt.Errorf("%w: seal of combined %s stage %d (plan %s): task %d (group %d, bucket %d) was made from other workers of group %d than its record names now (%s): the record was formed anew after gc deleted the plan's keys; this plan cannot seal, combine the sealed stage with a plan made after the seal",
				ErrGroupConflict, s.query, s.stage, s.plan.ID, n, g, j, g, strings.Join(recs[g].ids(), ","))
		}
	}
	return nil
}

// sealedFirstLevel loads the first level an overlapped plan's seal
// checks against. Not sealed, it names the workers of 0..N-1 that have
// not committed, for the first level's seal needs them.
func (s *Stage) sealedFirstLevel(ctx context.Context) (*manifest.Stage, error) {
	what := fmt.Sprintf("seal of combined %s stage %d (plan %s)", s.query, s.stage, s.plan.ID)
	m, err := manifest.LoadStageManifest(ctx, s.st, s.l, s.query, s.stage)
	if err == nil {
		return m, nil
	}
	if !store.IsNotFound(err) {
		return nil, fmt.Errorf("%s: the first level: %w", what, err)
	}
	committed, lerr := s.commitOrder(ctx)
	if lerr != nil {
		return nil, fmt.Errorf("%s: the workers committed: %w", what, lerr)
	}
	have := map[string]bool{}
	for _, id := range committed {
		have[id] = true
	}
	var missing []string
	for w := range s.overlap.workers {
		if id := strconv.Itoa(w); !have[id] {
			missing = append(missing, id)
		}
	}
	named := strings.Join(missing[:min(len(missing), sealListed)], ", ")
	if len(missing) > sealListed {
		named += fmt.Sprintf(" and %d more", len(missing)-sealListed)
	}
	if len(missing) == 0 {
		return nil, fmt.Errorf("%w: seal of combined %s stage %d: no stage manifest at %s; every worker 0..%d has committed: seal the first level first (seal --workers %d)",
			ErrNotSealed, s.query, s.stage, s.l.StageManifestKey(s.query, s.stage), s.overlap.workers-1, s.overlap.workers)
	}
	return nil, fmt.Errorf("%w: seal of combined %s stage %d: no stage manifest at %s; seal the first level first (%d of workers 0..%d have not committed: %s)",
		ErrNotSealed, s.query, s.stage, s.l.StageManifestKey(s.query, s.stage), len(missing), s.overlap.workers-1, named)
}

// expected says whether id is one of the workers 0..N-1 an overlapped
// plan expects, written as a seal of N workers names them.
func (s *Stage) expected(id string) bool {
	n, err := strconv.Atoi(id)
	return err == nil && n >= 0 && n < s.overlap.workers && strconv.Itoa(n) == id
}

// compareIDs orders worker IDs as seals do: decimal IDs numerically,
// then by string.
func compareIDs(a, b string) int {
	na, ea := strconv.ParseUint(a, 10, 63)
	nb, eb := strconv.ParseUint(b, 10, 63)
	if ea == nil && eb == nil {
		return cmp.Compare(na, nb)
	}
	return strings.Compare(a, b)
}

func firstDuplicate(ids []string) string {
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return id
		}
		seen[id] = true
	}
	return ""
}
