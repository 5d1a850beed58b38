package combine

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
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
// plan is ErrAlreadyCombined. gc holds combined.json while it deletes
// plans left over (older than its --older-than): a seal that finds it
// held fails with ErrMissingTasks naming the hold, and deletes its index.
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
	var groups []*groupRecord
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
		var err error
		if groups, err = s.checkGroups(ctx); err != nil {
			return nil, err
		}
	}
	// The task manifests, by one LIST of the plan's folder.
	dir := s.l.ObjectKey(s.query, s.stage, manifest.PlanDir(p.ID))
	objs, _, err := s.st.List(ctx, dir, "/")
	if err != nil {
		return nil, fmt.Errorf("%s: list %s: %w", what, dir, err)
	}
	read := map[string]store.ObjectInfo{}
	for _, o := range objs {
		read[o.Key] = o
	}
	var missing []string
	ids := make([]string, p.Tasks())
	keys := map[string]string{}
	for n := range p.Tasks() {
		ids[n] = p.taskID(n)
		key := s.l.ObjectKey(s.query, s.stage, manifest.TaskManifestName(p.ID, n))
		keys[ids[n]] = key
		if _, ok := read[key]; !ok {
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
	if s.overlap != nil {
		if err := s.checkTaskGroups(c, groups); err != nil {
			s.deleteIndex(ctx, indexKey)
			return nil, err
		}
	}
	// The combined level holds every frame of the first, and no other.
	if c.Totals.Rows != s.level1.Totals.Rows || c.Totals.Frames != s.level1.Totals.Frames || c.Totals.BytesStored != s.level1.Totals.BytesStored {
		s.deleteIndex(ctx, indexKey)
		return nil, fmt.Errorf("%w: %s: the tasks hold %d rows in %d frames (%d bytes), the stage %d rows in %d frames (%d bytes)",
			manifest.ErrCorrupt, what, c.Totals.Rows, c.Totals.Frames, c.Totals.BytesStored, s.level1.Totals.Rows, s.level1.Totals.Frames, s.level1.Totals.BytesStored)
	}
	c.SealedAt = time.Now().UTC()
	c.Combines = manifest.OriginOf(s.level1)
	c.Combines.Tasks = s.taskDigest(p.ID, p.Tasks(), read)
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
		var held *heldError
		if errors.As(err, &held) {
			s.deleteIndex(ctx, indexKey)
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s was taken and cannot be read: %w", what, ckey, err)
		}
		if wb == nil {
			s.deleteIndex(ctx, indexKey)
			return nil, fmt.Errorf("%w: %s: %s was taken, then withdrawn, while this seal put its level; seal again", ErrMissingTasks, what, ckey)
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
	if changed, err := s.verify(ctx, p.ID, p.Tasks(), c.Combines.Tasks); changed != nil || err != nil {
		if changed != nil {
			s.withdraw(ctx, ckey, b, indexKey)
			s.combined = nil
			err = changed
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return s.combined, s.publish(ctx, b)
}

// taskDigest is the digest of the plan's task manifests as a LIST found
// them (Origin.Tasks): each one's stage-relative key, size and time, in
// task order.
func (s *Stage) taskDigest(planID string, tasks int, listed map[string]store.ObjectInfo) string {
	h := sha256.New()
	for n := range tasks {
		rel := manifest.TaskManifestName(planID, n)
		o := listed[s.l.ObjectKey(s.query, s.stage, rel)]
		fmt.Fprintf(h, "%s %d %d\n", rel, o.Size, o.LastModified.UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// verify checks, once combined.json holds the level and before the
// stage manifest names it, that the plan's task manifests are still the
// ones the level was built from: every one there (one LIST), and, given
// the level's digest of them (Origin.Tasks), each the same size and time
// as the first seal's LIST found it. gc deletes a plan's keys only while
// it holds combined.json itself (package gchold), so while the level is
// there they cannot change, and every seal of the level that checks
// while it is there decides alike: none publishes a level another
// withdraws. A manifest missing or written again since (gc deleted the
// plan's keys before the put, and a task ran anew) means the level names
// objects gc deleted: it must not be published (changed, an
// ErrMissingTasks). A LIST that fails decides nothing (err): the level
// stays for a seal run again to check.
func (s *Stage) verify(ctx context.Context, planID string, tasks int, digest string) (changed, err error) {
	dir := s.l.ObjectKey(s.query, s.stage, manifest.PlanDir(planID))
	objs, _, err := s.st.List(ctx, dir, "/")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w; the level at %s stays, for a seal run again to check", dir, err, CombinedName)
	}
	have := map[string]store.ObjectInfo{}
	for _, o := range objs {
		have[o.Key] = o
	}
	var missing []string
	for n := range tasks {
		if _, ok := have[s.l.ObjectKey(s.query, s.stage, manifest.TaskManifestName(planID, n))]; !ok {
			missing = append(missing, fmt.Sprint(n))
		}
	}
	if len(missing) == 0 {
		if digest == "" || s.taskDigest(planID, tasks, have) == digest {
			return nil, nil
		}
		return fmt.Errorf("%w: the %d task manifests under %s were written again (by tasks run anew after a gc deleted the plan's keys, the plan being older than --older-than) since the seal read them; seal again",
			ErrMissingTasks, tasks, dir), nil
	}
	named := strings.Join(missing[:min(len(missing), sealListed)], ", ")
	if len(missing) > sealListed {
		named += fmt.Sprintf(" and %d more", len(missing)-sealListed)
	}
	return fmt.Errorf("%w: %d of %d task manifests under %s were deleted (by gc, the plan being older than --older-than) after the seal read them: tasks %s; run them again and seal",
		ErrMissingTasks, len(missing), tasks, dir, named), nil
}

// withdraw deletes a combined level that must not be published: its
// manifest at combined.json, if combined.json still holds it (b) rather
// than gc's hold or another level, and then, once combined.json is
// known not to name it, its index. Whatever it cannot tell is left
// (to a seal run again, or gc).
func (s *Stage) withdraw(ctx context.Context, ckey string, b []byte, indexKey string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	now, _, err := getCombined(dctx, s.st, s.l, s.query, s.stage)
	var held *heldError
	if err != nil && !errors.As(err, &held) {
		return
	}
	if bytes.Equal(now, b) {
		if err := s.st.Delete(dctx, ckey); err != nil {
			return
		}
	}
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
	// Not published yet: check, as the seal that committed it does, that
	// its task manifests are those it was built from, and then that
	// combined.json held the level all along (its bytes, which name an
	// index of this seal's own, are never put twice): the check then
	// saw what every other seal of the level sees, and none withdraws
	// it.
	digest := ""
	if s.combined.Combines != nil {
		digest = s.combined.Combines.Tasks
	}
	ckey := s.l.StagePrefix(s.query, s.stage) + CombinedName
	if changed, err := s.verify(ctx, plan, len(s.combined.Workers), digest); changed != nil || err != nil {
		if changed != nil {
			s.withdraw(ctx, ckey, want, s.l.ObjectKey(s.query, s.stage, s.combined.Index.Key))
			err = changed
		}
		return nil, fmt.Errorf("seal of combined %s stage %d (plan %s): %w", s.query, s.stage, plan, err)
	}
	if now, _, err := getCombined(ctx, s.st, s.l, s.query, s.stage); err != nil || !bytes.Equal(now, want) {
		if err == nil {
			err = fmt.Errorf("%w: %s was withdrawn (or replaced) while this seal checked it; run the tasks again and seal", ErrMissingTasks, ckey)
		}
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
