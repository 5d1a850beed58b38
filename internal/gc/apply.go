package gc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durashuffle/durashuffle/internal/gchold"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// Run collects garbage under the layout's root: NewPlan, then Apply.
// Run is idempotent: an interrupted run is finished by running it again.
func Run(ctx context.Context, st store.Store, l manifest.Layout, o Options) (Report, error) {
	p, err := NewPlan(ctx, st, l, o)
	if err != nil {
		return Report{}, err
	}
	return p.Apply(ctx, st)
}

// Apply carries the plan out, in this order: it aborts the uploads;
// deletes the expired results stages (a combined level's manifest and
// the stage manifest first, then worker and task manifests, then data,
// so no manifest ever names a deleted object); then the leftovers of
// combining (see leftovers); then deletes the worker
// and task manifests that go (a combined stage's first level, leftovers
// of combining), and then the orphan objects. On an error the report says what was removed
// before it.
func (p *Plan) Apply(ctx context.Context, st store.Store) (Report, error) {
	r := p.start()
	for _, u := range p.aborts {
		if err := st.AbortMultipart(ctx, u.Key, u.UploadID); err != nil && !store.IsNotFound(err) {
			return r, fmt.Errorf("gc: abort upload %s of %s (initiated %s): %w", u.UploadID, u.Key, u.Initiated.Format(time.RFC3339), err)
		}
		r.aborted(u)
	}
	for _, x := range p.expire {
		for i, keys := range x.keys {
			if err := deleteKeys(ctx, st, keys); err != nil {
				return r, fmt.Errorf("gc: delete expired results %s stage %d (%s): %w", x.stage.Query, x.stage.Stage, expiryGroups[i], err)
			}
		}
		r.expired(x.stage)
	}
	for _, lo := range p.leftovers {
		if err := lo.apply(ctx, st, &r); err != nil {
			return r, err
		}
	}
	for _, objs := range []struct {
		what string
		objs []store.ObjectInfo
	}{{"worker and task manifests", p.manifests}, {"orphan objects", p.orphans}} {
		keys := make([]string, len(objs.objs))
		for i, obj := range objs.objs {
			keys[i] = obj.Key
		}
		if err := deleteKeys(ctx, st, keys); err != nil {
			return r, fmt.Errorf("gc: delete %d %s: %w", len(keys), objs.what, err)
		}
		r.orphaned(objs.objs)
	}
	return r, nil
}

func deleteKeys(ctx context.Context, st store.Deleter, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return st.Delete(ctx, keys...)
}

// apply deletes a stage's leftovers of combining while it holds the
// stage's combined.json (package gchold): it takes it with
// If-None-Match, as a seal commits a level there, so that no level can be
// committed while it deletes, and it deletes nothing of a plan while a
// level is there. Then the task manifests, then (if combined.json is
// still its hold) the objects, indexes and group records, then the
// hold. A hold older than --older-than, left by a gc that was killed,
// is taken over (takeover).
func (lo leftovers) apply(ctx context.Context, st store.Store, r *Report) error {
	_, hold := gchold.New(lo.plans, r.Now)
	taken, err := lo.take(ctx, st, hold, r)
	if err != nil || !taken {
		return err
	}
	if err := deleteKeys(ctx, st, keysOf(lo.manifests)); err != nil {
		lo.release(ctx, st, hold)
		return fmt.Errorf("gc: delete %d task manifests of combining left over: %w", len(lo.manifests), err)
	}
	r.orphaned(lo.manifests)
	if ok, err := lo.holds(ctx, st, hold); err != nil || !ok {
		if err == nil {
			r.Skipped = append(r.Skipped, fmt.Sprintf("%s: taken from this gc's hold while it deleted the task manifests of combining left over; %d other keys stay", lo.combined, len(lo.rest)))
		}
		return err
	}
	if err := deleteKeys(ctx, st, keysOf(lo.rest)); err != nil {
		lo.release(ctx, st, hold)
		return fmt.Errorf("gc: delete %d objects of combining left over: %w", len(lo.rest), err)
	}
	r.orphaned(lo.rest)
	lo.release(ctx, st, hold)
	return nil
}

// take puts hold at combined.json with If-None-Match, and says whether
// gc now holds it. Found taken: by this hold (a put whose answer was
// lost), it is held; by the stale hold the plan found (takeover), that
// one is deleted and the put made once more; by a level or another
// hold, the stage is skipped, reported, and its keys stay.
func (lo leftovers) take(ctx context.Context, st store.Store, hold []byte, r *Report) (bool, error) {
	for try := 0; ; try++ {
		err := st.Put(ctx, lo.combined, hold, store.PutOptions{IfNoneMatch: true, ContentType: "application/json"})
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, store.ErrPreconditionFailed) {
			lo.release(ctx, st, hold) // a put cut off may have landed
			return false, fmt.Errorf("gc: hold %s before deleting combining left over: %w", lo.combined, err)
		}
		b, err := readSmall(ctx, st, lo.combined, maxHoldBytes)
		switch {
		case store.IsNotFound(err):
			if try == 0 {
				continue // withdrawn meanwhile: try once more
			}
			r.Skipped = append(r.Skipped, fmt.Sprintf("%s: changed twice while gc took it; combining left over stays for the next gc", lo.combined))
			return false, nil
		case err != nil && !errors.Is(err, errLarger):
			return false, fmt.Errorf("gc: read %s: %w", lo.combined, err)
		case bytes.Equal(b, hold):
			return true, nil
		case try == 0 && lo.takeover != nil && bytes.Equal(b, lo.takeover):
			if err := st.Delete(ctx, lo.combined); err != nil {
				return false, fmt.Errorf("gc: delete the stale hold at %s: %w", lo.combined, err)
			}
			continue
		}
		if h, ok := gchold.Parse(b); ok {
			r.Skipped = append(r.Skipped, fmt.Sprintf("%s: %v; its %d keys of combining left over are that gc's", lo.combined, h, len(lo.manifests)+len(lo.rest)))
		} else {
			r.Skipped = append(r.Skipped, fmt.Sprintf("%s: committed while gc planned to delete combining left over; its %d keys stay", lo.combined, len(lo.manifests)+len(lo.rest)))
		}
		return false, nil
	}
}

// holds says whether combined.json is still hold.
func (lo leftovers) holds(ctx context.Context, st store.Store, hold []byte) (bool, error) {
	b, err := readSmall(ctx, st, lo.combined, maxHoldBytes)
	if store.IsNotFound(err) {
		return false, nil
	}
	if err != nil && !errors.Is(err, errLarger) {
		return false, fmt.Errorf("gc: read %s: %w", lo.combined, err)
	}
	return err == nil && bytes.Equal(b, hold), nil
}

// release deletes the hold if combined.json is still it, on a context
// of its own: a hold left behind keeps the stage from being combined
// until a gc takes it over.
func (lo leftovers) release(ctx context.Context, st store.Store, hold []byte) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if ok, _ := lo.holds(dctx, st, hold); ok {
		_ = st.Delete(dctx, lo.combined)
	}
}

func keysOf(objs []store.ObjectInfo) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Key
	}
	return out
}
