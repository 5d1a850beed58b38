package manifest

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/durashuffle/durashuffle/store"
)

// BuildLevel merges worker manifests stored at keys of the caller's
// choosing (keyOf(id): the full key of worker id's manifest, a
// worker-format container whose worker field is id) into an index object
// at the stage-relative key indexRel, as Seal does, and returns the
// stage that names it without writing any stage manifest: the caller
// commits it (Encode, then a conditional put of its own). It is how a
// second level of a stage (combined objects, see package combine) gets
// an index that readers use as they use a sealed stage's.
//
// Workers are ordered as Seal orders them (compareWorkers: numerically
// for decimal IDs, else by string), which is the order of a partition's
// frames in the index. A worker without a manifest fails with
// ErrMissingWorkers naming it; nothing is written then. An index left by
// a later failure is the caller's to delete.
func BuildLevel(ctx context.Context, st store.Store, l Layout, query string, stage int, ids []string, keyOf func(id string) string, indexRel string) (*Stage, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("build level of %s stage %d: no workers given", query, stage)
	}
	if len(ids) > MaxSealWorkers {
		return nil, fmt.Errorf("%w: build level of %s stage %d: %d workers, at most %d (MaxSealWorkers)", ErrTooManyWorkers, query, stage, len(ids), MaxSealWorkers)
	}
	if err := checkRelKey(indexRel); err != nil {
		return nil, fmt.Errorf("build level of %s stage %d: index %w", query, stage, err)
	}
	sorted := slices.Clone(ids)
	slices.SortFunc(sorted, compareWorkers)
	sorted = slices.Compact(sorted)
	ws, err := sealHeads(ctx, st, l, query, stage, sorted, keyOf)
	if err != nil {
		return nil, err
	}
	s := &Stage{FormatVersion: FormatVersion, Kind: kindStage, Query: query, Stage: stage,
		Partitions: ws[0].w.Partitions, Schema: ws[0].w.Schema, Results: ws[0].w.Results}
	for _, w := range ws {
		if string(w.w.Schema) != string(s.Schema) {
			return nil, fmt.Errorf("%w: %s stage %d: worker %s (%s) has a different schema than worker %s", ErrCorrupt, query, stage, w.w.Worker, w.key, ws[0].w.Worker)
		}
		if err := SameEncryption(ws[0].w, w.w); err != nil {
			return nil, fmt.Errorf("build level of %s stage %d: %w", query, stage, err)
		}
		s.Workers = append(s.Workers, *w.w)
		s.Totals.add(w.w.Totals)
	}
	if int64(s.Totals.Frames) > math.MaxUint32 {
		return nil, fmt.Errorf("build level of %s stage %d: %d frames, an index holds at most %d", query, stage, s.Totals.Frames, uint32(math.MaxUint32))
	}
	x, err := writeIndex(ctx, st, l.ObjectKey(query, stage, indexRel), s, ws)
	if err != nil {
		return nil, err
	}
	x.Key = indexRel
	s.Index = x
	return s, nil
}
