package gc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
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
		if err := lo.apply(ctx, st, &r, p.applyNow()); err != nil {
			return r, err
		}
	}
	for _, objs := range []struct {
		what string
		objs []store.ObjectInfo
	}{{"worker and task manifests", p.manifests}, {"orphan objects", p.orphans}} {
		if err := deleteKeys(ctx, st, keysOf(objs.objs)); err != nil {
			return r, fmt.Errorf("gc: delete %d %s: %w", len(objs.objs), objs.what, err)
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
// If-None-Match, as a seal commits a level there, so that no level can
// be committed while it deletes, and it deletes nothing of a plan while a
// level is there. Then the task manifests, then (if combined.json is
// still the hold) the objects, indexes and group records, then the
// hold. A hold older than the plan's hold cutoff, left by a gc that was
// killed (takeover), is worked under as it is and removed at the end.
// A hold that cannot be removed is reported: it keeps the stage from
// being combined until a later gc takes it over.
func (lo leftovers) apply(ctx context.Context, st store.Store, r *Report, now time.Time) error {
	lo.manifests, lo.rest = slices.Clone(lo.manifests), slices.Clone(lo.rest) // the plan stays as it was made
	_, mine := gchold.New(lo.plans, now)
	hold, err := lo.take(ctx, st, mine, r)
	if err != nil || hold == nil {
		return err
	}
	if err := lo.dropActive(ctx, st, r); err != nil {
		lo.release(ctx, st, hold, r)
		return err
	}
	if err := deleteKeys(ctx, st, keysOf(lo.manifests)); err != nil {
		lo.release(ctx, st, hold, r)
		return fmt.Errorf("gc: delete %d task manifests of combining left over: %w", len(lo.manifests), err)
	}
	r.orphaned(lo.manifests)
	if ok, err := lo.holds(ctx, st, hold); err != nil || !ok {
		if err != nil {
			lo.release(ctx, st, hold, r)
			return fmt.Errorf("gc: read %s before deleting combining left over: %w", lo.combined, err)
		}
		r.Skipped = append(r.Skipped, fmt.Sprintf("%s: no longer gc's hold after gc deleted the task manifests of combining left over; %d other keys stay", lo.combined, len(lo.rest)))
		return nil
	}
	if err := deleteKeys(ctx, st, keysOf(lo.rest)); err != nil {
		lo.release(ctx, st, hold, r)
		return fmt.Errorf("gc: delete %d objects of combining left over: %w", len(lo.rest), err)
	}
	r.orphaned(lo.rest)
	lo.release(ctx, st, hold, r)
	return nil
}

// take puts mine at combined.json with If-None-Match, and returns the
// bytes of the hold gc then works under: mine, or the stale hold the
// plan found (takeover), or nil when the stage is skipped (a level, or
// another gc's hold, is there; reported, and its keys stay). A put whose
// answer was lost finds mine there.
func (lo leftovers) take(ctx context.Context, st store.Store, mine []byte, r *Report) ([]byte, error) {
	for try := 0; ; try++ {
		err := st.Put(ctx, lo.combined, mine, store.PutOptions{IfNoneMatch: true, ContentType: "application/json"})
		if err == nil {
			return mine, nil
		}
		if !errors.Is(err, store.ErrPreconditionFailed) {
			lo.release(ctx, st, mine, r) // a put cut off may have landed
			return nil, fmt.Errorf("gc: hold %s before deleting combining left over: %w", lo.combined, err)
		}
		b, err := readHold(ctx, st, lo.combined)
		switch {
		case store.IsNotFound(err):
			if try == 0 {
				continue // withdrawn meanwhile: try once more
			}
			r.Skipped = append(r.Skipped, fmt.Sprintf("%s: changed twice while gc took it; combining left over stays for the next gc", lo.combined))
			return nil, nil
		case err != nil:
			lo.release(ctx, st, mine, r)
			return nil, fmt.Errorf("gc: read %s: %w", lo.combined, err)
		case bytes.Equal(b, mine):
			return mine, nil
		case lo.takeover != nil && bytes.Equal(b, lo.takeover):
			return lo.takeover, nil
		}
		if h, ok := gchold.Parse(b); ok {
			r.Skipped = append(r.Skipped, fmt.Sprintf("%s: %v; its %d keys of combining left over are that gc's", lo.combined, h, len(lo.manifests)+len(lo.rest)))
		} else {
			r.Skipped = append(r.Skipped, fmt.Sprintf("%s: committed while gc planned to delete combining left over; its %d keys stay", lo.combined, len(lo.manifests)+len(lo.rest)))
		}
		return nil, nil
	}
}

// dropActive lists each plan's folder again, now that gc holds the
// stage, and takes out of lo the keys of every plan with a key newer
// than the cutoff there: a task that committed (or a group formed) since
// the plan was made. Deleting the rest of such a plan would leave its
// new task manifests beside group records formed anew.
func (lo *leftovers) dropActive(ctx context.Context, st store.Store, r *Report) error {
	active := map[string]bool{}
	for _, plan := range lo.plans {
		objs, _, err := st.List(ctx, lo.dirs[plan], "")
		if err != nil {
			return fmt.Errorf("gc: list %s before deleting combining left over: %w", lo.dirs[plan], err)
		}
		for _, o := range objs {
			if o.LastModified.After(lo.cutoff) {
				active[plan] = true
				r.Skipped = append(r.Skipped, fmt.Sprintf("%s: written since gc planned to delete plan %s (newer than --older-than); the plan's keys stay", o.Key, plan))
				break
			}
		}
	}
	if len(active) == 0 {
		return nil
	}
	keep := func(o store.ObjectInfo) bool {
		_, plan, _, ok := parseCombineKey(lo.layout, o.Key)
		return ok && active[plan]
	}
	lo.manifests = slices.DeleteFunc(lo.manifests, keep)
	lo.rest = slices.DeleteFunc(lo.rest, keep)
	return nil
}

// holds says whether combined.json is still hold.
func (lo leftovers) holds(ctx context.Context, st store.Store, hold []byte) (bool, error) {
	b, err := readHold(ctx, st, lo.combined)
	if store.IsNotFound(err) {
		return false, nil
	}
	return err == nil && bytes.Equal(b, hold), err
}

// release deletes the hold if combined.json is still it, on a context
// of its own; a hold it could not remove is reported.
func (lo leftovers) release(ctx context.Context, st store.Store, hold []byte, r *Report) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	ok, err := lo.holds(dctx, st, hold)
	if err == nil && ok {
		err = st.Delete(dctx, lo.combined)
	}
	if err != nil {
		r.Skipped = append(r.Skipped, fmt.Sprintf("%s: gc's hold may be left (%v): the stage cannot be combined until a gc takes it over, once it is older than --older-than (at least %v)", lo.combined, err, minHoldAge))
	}
}

func keysOf(objs []store.ObjectInfo) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Key
	}
	return out
}
