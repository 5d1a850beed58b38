package combine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// sealListed is how many missing tasks a seal's error names.
const sealListed = 32

// Seal writes the combined level once every task of the plan has
// committed: an index over the task manifests (as a stage's seal
// merges worker manifests), the combined level's stage manifest at
// combined.json with If-None-Match (its commit point: the first seal
// wins, a loser deletes its index), and then the same bytes over the
// stage's manifest.json, where every reader looks. A reader that opened
// the stage before keeps reading the first level, whose objects stay.
//
// A task without a manifest fails the seal with ErrMissingTasks naming
// it; nothing is written. Sealing a stage already combined by this plan
// is a no-op that returns the combined level (and completes the copy to
// manifest.json if a seal stopped before it); one combined by another
// plan is ErrAlreadyCombined.
func (s *Stage) Seal(ctx context.Context) (*manifest.Stage, error) {
	if s.combined != nil {
		return s.finish(ctx)
	}
	p := s.plan
	what := fmt.Sprintf("seal of combined %s stage %d (plan %s)", s.query, s.stage, p.ID)
	if b, key, err := getCombined(ctx, s.st, s.l, s.query, s.stage); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	} else if b != nil {
		if s.combined, err = manifest.DecodeStage(key, b); err != nil {
			return nil, err
		}
		return s.finish(ctx)
	}
	if s.overlap != nil {
		// Made while the stage was written: the first level must be
		// sealed, and the groups must hold exactly its workers.
		if s.level1 == nil {
			m, err := s.sealedFirstLevel(ctx)
			if err != nil {
				return nil, err
			}
			s.level1 = m
		}
		if err := s.checkGroups(ctx); err != nil {
			return nil, err
		}
	}
	// The task manifests, by one LIST of the plan's folder.
	dir := s.l.ObjectKey(s.query, s.stage, manifest.PlanDir(p.ID))
	objs, _, err := s.st.List(ctx, dir, "/")
	if err != nil {
		return nil, fmt.Errorf("%s: list %s: %w", what, dir, err)
	}
	have := map[string]bool{}
	read := map[string]store.ObjectInfo{}
	for _, o := range objs {
		have[o.Key] = true
		read[o.Key] = o
	}
	var missing []string
	ids := make([]string, p.Tasks())
	keys := map[string]string{}
	for n := range p.Tasks() {
		ids[n] = p.taskID(n)
		key := s.l.ObjectKey(s.query, s.stage, manifest.TaskManifestName(p.ID, n))
		keys[ids[n]] = key
		if !have[key] {
			g, j := p.Task(n)
			b := p.Buckets[j]
			missing = append(missing, fmt.Sprintf("task %d (group %d, bucket %d: partitions [%d, %d))", n, g, j, b.Lo, b.Hi))
		}
	}
	if len(missing) > 0 {
		named := strings.Join(missing[:min(len(missing), sealListed)], ", ")
		if more := len(missing) - sealListed; more > 0 {
			named += fmt.Sprintf(" and %d more", more)
		}
		return nil, fmt.Errorf("%w: %s: %d of %d tasks have no manifest under %s: %s", ErrMissingTasks, what, len(missing), p.Tasks(), dir, named)
	}
	indexRel := manifest.PlanDir(p.ID) + manifest.IndexName(newSealID())
	indexKey := s.l.ObjectKey(s.query, s.stage, indexRel)
	c, err := manifest.BuildLevel(ctx, s.st, s.l, s.query, s.stage, ids, func(id string) string { return keys[id] }, indexRel)
	if err != nil {
		if errors.Is(err, manifest.ErrMissingWorkers) {
			err = fmt.Errorf("%w: %w", ErrMissingTasks, err)
		}
		s.deleteIndex(ctx, indexKey)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	// The combined level holds every frame of the first, and no other.
	if c.Totals.Rows != s.level1.Totals.Rows || c.Totals.Frames != s.level1.Totals.Frames || c.Totals.BytesStored != s.level1.Totals.BytesStored {
		s.deleteIndex(ctx, indexKey)
		return nil, fmt.Errorf("%w: %s: the tasks hold %d rows in %d frames (%d bytes), the stage %d rows in %d frames (%d bytes)",
			manifest.ErrCorrupt, what, c.Totals.Rows, c.Totals.Frames, c.Totals.BytesStored, s.level1.Totals.Rows, s.level1.Totals.Frames, s.level1.Totals.BytesStored)
	}
	c.SealedAt = time.Now().UTC()
	c.Combines = manifest.OriginOf(s.level1)
	b, err := c.Encode()
	if err != nil {
		s.deleteIndex(ctx, indexKey)
		return nil, err
	}
	ckey := s.l.StagePrefix(s.query, s.stage) + CombinedName
	if err := s.st.Put(ctx, ckey, b, store.PutOptions{IfNoneMatch: true, ContentType: "application/json"}); err != nil {
		if !errors.Is(err, store.ErrPreconditionFailed) {
			// A put cut off may have landed: keep the index then (the
			// manifest would name it).
			if !store.IsTransient(err) && ctx.Err() == nil {
				s.deleteIndex(ctx, indexKey)
			}
			return nil, fmt.Errorf("%s: write %s: %w", what, ckey, err)
		}
		// Taken: the level that stands is this seal's own (a put whose
		// answer was lost landed, and its retry was refused) or another
		// seal's, and this index goes.
		wb, key, err := getCombined(ctx, s.st, s.l, s.query, s.stage)
		if err != nil || wb == nil {
			return nil, fmt.Errorf("%s: %s was taken and cannot be read: %w", what, ckey, err)
		}
		if s.combined, err = manifest.DecodeStage(key, wb); err != nil {
			return nil, err
		}
		if s.combined.Index == nil || s.combined.Index.Key != indexRel {
			s.deleteIndex(ctx, indexKey)
		}
		return s.finish(ctx)
	}
	if s.combined, err = manifest.DecodeStage(ckey, b); err != nil {
		return nil, err
	}
	if err := s.verify(ctx, p.ID, p.Tasks(), read); err != nil {
		s.withdraw(ctx, ckey, indexKey)
		s.combined = nil
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return s.combined, s.publish(ctx, b)
}

// verify checks, once combined.json is committed and before the stage
// manifest names the level, that every task manifest of the plan is
// still there (one LIST), and, given read (the manifests as this seal's
// first LIST found them), that each is the one it read: the same size
// and time. gc deletes a plan's task manifests before it looks for
// combined.json, and deletes the plan's objects only when it finds none:
// so when the manifests the level was built from are all there after
// combined.json was committed, no gc can delete what the level names;
// when one is missing, or was written again since (a task run anew after
// a gc deleted the first run's manifest and is deleting its objects), the
// level must not be published.
func (s *Stage) verify(ctx context.Context, planID string, tasks int, read map[string]store.ObjectInfo) error {
	dir := s.l.ObjectKey(s.query, s.stage, manifest.PlanDir(planID))
	objs, _, err := s.st.List(ctx, dir, "/")
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	have := map[string]store.ObjectInfo{}
	for _, o := range objs {
		have[o.Key] = o
	}
	var missing []string
	for n := range tasks {
		key := s.l.ObjectKey(s.query, s.stage, manifest.TaskManifestName(planID, n))
		now, ok := have[key]
		was, known := read[key]
		if !ok || known && (now.Size != was.Size || !now.LastModified.Equal(was.LastModified)) {
			missing = append(missing, fmt.Sprint(n))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	named := strings.Join(missing[:min(len(missing), sealListed)], ", ")
	if len(missing) > sealListed {
		named += fmt.Sprintf(" and %d more", len(missing)-sealListed)
	}
	return fmt.Errorf("%w: %d of %d task manifests under %s were deleted (by gc, the plan being older than --older-than), or written again, after the seal read them: tasks %s; run them again and seal",
		ErrMissingTasks, len(missing), tasks, dir, named)
}

// withdraw deletes a combined level that must not be published: its
// manifest at combined.json, then its index.
func (s *Stage) withdraw(ctx context.Context, ckey, indexKey string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = s.st.Delete(dctx, ckey)
	_ = s.st.Delete(dctx, indexKey)
}

// finish completes a committed combined level: it checks the plan, and
// writes the level's manifest over the stage's when a seal stopped
// before it.
func (s *Stage) finish(ctx context.Context) (*manifest.Stage, error) {
	if s.plan != nil && combinedPlan(s.combined) != s.plan.ID {
		return nil, fmt.Errorf("%w: %s stage %d is combined by plan %s, not %s", ErrAlreadyCombined, s.query, s.stage, combinedPlan(s.combined), s.plan.ID)
	}
	eg, gctx := errgroup.WithContext(ctx)
	var want, have []byte
	eg.Go(func() (err error) {
		want, _, err = getCombined(gctx, s.st, s.l, s.query, s.stage)
		return err
	})
	eg.Go(func() (err error) {
		have, err = readAll(gctx, s.st, s.l.StageManifestKey(s.query, s.stage), manifest.MaxManifestBytes)
		return err
	})
	if err := eg.Wait(); err != nil {
		return nil, fmt.Errorf("seal of combined %s stage %d: %w", s.query, s.stage, err)
	}
	if bytes.Equal(want, have) {
		return s.combined, nil
	}
	plan := combinedPlan(s.combined)
	if want == nil {
		// combined.json is gone: withdrawn by the seal that committed it
		// (gc deleted task manifests it read), or expired. The level
		// stands only if the stage manifest names it.
		if m, err := manifest.DecodeStage(s.l.StageManifestKey(s.query, s.stage), have); err == nil && combinedPlan(m) == plan &&
			m.Index != nil && s.combined.Index != nil && m.Index.Key == s.combined.Index.Key {
			return s.combined, nil
		}
		return nil, fmt.Errorf("%w: seal of combined %s stage %d (plan %s): %s was withdrawn before the stage manifest named it; run the tasks again and seal",
			ErrMissingTasks, s.query, s.stage, plan, CombinedName)
	}
	// Not published yet: as a seal that commits, check first that no gc
	// is deleting what the level names.
	if err := s.verify(ctx, plan, len(s.combined.Workers), nil); err != nil {
		ckey := s.l.StagePrefix(s.query, s.stage) + CombinedName
		s.withdraw(ctx, ckey, s.l.ObjectKey(s.query, s.stage, s.combined.Index.Key))
		return nil, fmt.Errorf("seal of combined %s stage %d (plan %s): %w", s.query, s.stage, plan, err)
	}
	return s.combined, s.publish(ctx, want)
}

// publish writes the combined level's manifest over the stage's. Every
// seal that gets here writes the same bytes, those at combined.json, so
// the put needs no condition: the stage manifest only ever goes from
// the first level to the combined one.
func (s *Stage) publish(ctx context.Context, b []byte) error {
	key := s.l.StageManifestKey(s.query, s.stage)
	if err := s.st.Put(ctx, key, b, store.PutOptions{ContentType: "application/json"}); err != nil {
		return fmt.Errorf("seal of combined %s stage %d: write %s: %w; the level is committed: seal again to publish it", s.query, s.stage, key, err)
	}
	return nil
}

func (s *Stage) deleteIndex(ctx context.Context, key string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = s.st.Delete(dctx, key)
}

func newSealID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}
