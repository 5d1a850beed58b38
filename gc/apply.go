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
// deletes the expired results stages (stage manifest first, then worker
// manifests, then data, so no manifest ever names a deleted object); then
// deletes the orphans. On an error the report says what was removed
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
				return r, fmt.Errorf("gc: delete expired results %s stage %d (%s): %w", x.stage.Query, x.stage.Stage, [...]string{"stage manifest", "worker manifests", "data"}[i], err)
			}
		}
		r.expired(x.stage)
	}
	keys := make([]string, len(p.orphans))
	for i, obj := range p.orphans {
		keys[i] = obj.Key
	}
	if err := deleteKeys(ctx, st, keys); err != nil {
		return r, fmt.Errorf("gc: delete %d orphan objects: %w", len(keys), err)
	}
	r.orphaned(p.orphans)
	return r, nil
}

func deleteKeys(ctx context.Context, st store.Deleter, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return st.Delete(ctx, keys...)
}
