package combine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/durashuffle/durashuffle/internal/gchold"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// Sentinel errors.
var (
	// ErrMissingTasks: a seal found tasks of the plan without a committed
	// task manifest. The error names them.
	ErrMissingTasks = errors.New("combine tasks have not committed")
	// ErrAlreadyCombined: the stage was combined by another plan.
	ErrAlreadyCombined = errors.New("stage already combined by another plan")
	// ErrInvalidPlan: the options ask for a plan the stage cannot have
	// (more buckets than partitions, more groups than workers).
	ErrInvalidPlan = errors.New("invalid combine plan")
	// ErrNotSealed: combining needs a sealed stage (its index sizes the
	// plan and lists each bucket's frames).
	ErrNotSealed = errors.New("stage not sealed")
	// ErrGroupNotReady: a group of a plan made while the stage is written
	// (Options.Expected) cannot form yet: its workers have not all committed.
	// The error says how many are missing; try again after more commit.
	ErrGroupNotReady = errors.New("combine group not ready")
	// ErrGroupConflict: the groups of a plan made while the stage is
	// written do not hold the sealed first level's workers exactly (one
	// left out of every group, put in two, or read at another attempt),
	// or an engine named other workers for a group than its record. The
	// error names the worker.
	ErrGroupConflict = errors.New("combine groups conflict with the first level")
)

// The keys of a combined level, relative to the stage prefix:
//
//	combined.json                                    the combined level's stage manifest: its commit point (or gc's hold, package gchold)
//	combine-{plan}/task-{n}.bin                      task n's manifest (a worker manifest container)
//	combine-{plan}/task-{n}/data-{write}.arrows      task n's combined object
//	combine-{plan}/index-{seal}.bin                  the combined level's index
//	combine-{plan}/group-{g}.json                    group g's workers and attempts (a plan made while the stage is written)
//
// With key_spread, combined objects live under a shard prefix instead
// (manifest.Layout.TaskDataKey), and their task manifests name them there.
//
// The combined seal then writes combined.json's bytes over the stage's
// manifest.json, so readers open the combined level with the one GET
// they always make.
const (
	// CombinedName is the stage-relative key of the combined level's
	// stage manifest.
	CombinedName = "combined.json"
)

// IsCombined says whether a stage manifest is a combined level's: its
// index lies in a plan's folder.
func IsCombined(m *manifest.Stage) bool {
	return m != nil && m.Index != nil && strings.HasPrefix(m.Index.Key, manifest.CombinePrefix)
}

// combinedPlan returns the ID of the plan a combined level was made by.
func combinedPlan(m *manifest.Stage) string {
	if !IsCombined(m) {
		return ""
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(m.Index.Key, manifest.CombinePrefix), "/")
	return id
}

// Stage is a sealed stage opened for combining: its first level (the
// workers' objects) and a plan, or the combined level when it is already
// combined. Safe for concurrent use: tasks may run at once.
type Stage struct {
	st     store.Store
	l      manifest.Layout
	query  string
	stage  int
	level1 *manifest.Stage
	plan   *Plan
	// combined is the committed combined level, when there is one.
	combined *manifest.Stage
	// overlap is set for a plan made while the stage is written
	// (Options.Expected): level1 is then nil until its seal loads it.
	overlap *overlap
}

// Open reads a sealed stage and plans its combining: a GET of the
// combined level's manifest (usually absent), a GET of the stage
// manifest and one ranged GET of its index's summary. A stage already
// combined is returned with Combined set and no plan; its tasks and
// seal are no-ops returning what is committed.
//
// With o.Expected, Open plans a stage whose writers may still be
// running, so that tasks start as groups of workers commit (see
// Options.Expected): one GET.
func Open(ctx context.Context, st store.Store, l manifest.Layout, query string, stage int, o Options) (*Stage, error) {
	if err := manifest.ValidateID("query", query); err != nil {
		return nil, err
	}
	if err := manifest.ValidateStage(stage); err != nil {
		return nil, err
	}
	if o.Expected != nil {
		return openOverlap(ctx, st, l, query, stage, *o.Expected, o)
	}
	s := &Stage{st: st, l: l, query: query, stage: stage}
	for try := 0; ; try++ {
		c, err := loadCombined(ctx, st, l, query, stage)
		if err != nil {
			return nil, err
		}
		if c != nil {
			s.combined = c
			return s, nil
		}
		m, err := manifest.LoadStageManifest(ctx, st, l, query, stage)
		if store.IsNotFound(err) {
			return nil, fmt.Errorf("%w: combine %s stage %d: no stage manifest at %s; seal the stage first", ErrNotSealed, query, stage, l.StageManifestKey(query, stage))
		}
		if err != nil {
			return nil, err
		}
		if IsCombined(m) {
			// Sealed combined between the two GETs: its own manifest is
			// there now.
			if try == 0 {
				continue
			}
			return nil, fmt.Errorf("%w: combine %s stage %d: the stage manifest names combined plan %s, and %s is missing", manifest.ErrCorrupt, query, stage, combinedPlan(m), l.StagePrefix(query, stage)+CombinedName)
		}
		s.level1 = m
		break
	}
	sum, err := s.level1.Summary(ctx, st, l)
	if err != nil {
		return nil, err
	}
	in := Input{Query: query, Stage: stage, Partitions: s.level1.Partitions, IndexKey: s.level1.Index.Key,
		PartitionBytes: make([]int64, len(sum))}
	for p, ps := range sum {
		in.PartitionBytes[p] = ps.BytesStored
	}
	for _, w := range s.level1.Workers {
		wi := WorkerInput{ID: w.Worker}
		for _, obj := range w.Objects {
			wi.Objects = append(wi.Objects, obj.Size)
		}
		in.Workers = append(in.Workers, wi)
	}
	if s.plan, err = MakePlan(in, o); err != nil {
		return nil, err
	}
	return s, nil
}

// Plan is the plan (nil when the stage is already combined).
func (s *Stage) Plan() *Plan { return s.plan }

// Combined is the committed combined level (nil until sealed, or when
// Open found it absent).
func (s *Stage) Combined() *manifest.Stage { return s.combined }

// loadCombined GETs the combined level's manifest; nil when absent, or
// when gc holds combined.json (no level is committed then).
func loadCombined(ctx context.Context, st store.Reader, l manifest.Layout, query string, stage int) (*manifest.Stage, error) {
	b, key, err := getCombined(ctx, st, l, query, stage)
	var held *heldError
	if errors.As(err, &held) {
		return nil, nil
	}
	if err != nil || b == nil {
		return nil, err
	}
	return manifest.DecodeStage(key, b)
}

// getCombined GETs combined.json: nil when absent, a *heldError when gc
// holds it (package gchold), else a level's manifest.
func getCombined(ctx context.Context, st store.Reader, l manifest.Layout, query string, stage int) ([]byte, string, error) {
	key := l.StagePrefix(query, stage) + CombinedName
	b, err := readAll(ctx, st, key, manifest.MaxManifestBytes)
	if store.IsNotFound(err) {
		return nil, key, nil
	}
	if h, ok := gchold.Parse(b); ok && err == nil {
		return nil, key, &heldError{key: key, hold: h}
	}
	return b, key, err
}

// heldError: gc holds combined.json while it deletes the keys of plans
// left over (package gchold), so no level can be committed; the plan's
// task manifests may be among what it deletes (ErrMissingTasks).
type heldError struct {
	key  string
	hold gchold.Hold
}

func (e *heldError) Error() string {
	return fmt.Sprintf("%s is %v; seal again once it is done, running the plan's tasks again if it deleted them (a hold left by a killed gc is removed by the first gc that finds it older than its --older-than)", e.key, e.hold)
}

func (e *heldError) Unwrap() error { return ErrMissingTasks }
