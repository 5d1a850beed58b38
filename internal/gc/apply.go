package gc

import (
	"context"
	"fmt"
	"time"

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

// apply deletes a stage's leftovers of combining: the task manifests,
// then, unless a combined seal has committed combined.json meanwhile
// (one GET), the rest. A seal that committed it finds the manifests gone
// and publishes nothing, and its level's objects stay until gc finds
// them named by nothing.
func (lo leftovers) apply(ctx context.Context, st store.Store, r *Report) error {
	keys := func(objs []store.ObjectInfo) []string {
		out := make([]string, len(objs))
		for i, o := range objs {
			out[i] = o.Key
		}
		return out
	}
	if err := deleteKeys(ctx, st, keys(lo.manifests)); err != nil {
		return fmt.Errorf("gc: delete %d task manifests of combining left over: %w", len(lo.manifests), err)
	}
	r.orphaned(lo.manifests)
	body, err := st.GetRange(ctx, lo.combined, 0, 1)
	switch {
	case err == nil:
		body.Close()
		r.Skipped = append(r.Skipped, fmt.Sprintf("%s: committed while gc deleted the task manifests of a plan left over; its %d other keys stay", lo.combined, len(lo.rest)))
		return nil
	case !store.IsNotFound(err):
		return fmt.Errorf("gc: look for %s before deleting combining left over: %w", lo.combined, err)
	}
	if err := deleteKeys(ctx, st, keys(lo.rest)); err != nil {
		return fmt.Errorf("gc: delete %d objects of combining left over: %w", len(lo.rest), err)
	}
	r.orphaned(lo.rest)
	return nil
}
