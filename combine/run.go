package combine

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/internal/safe"
)

// RunAll runs every task of the plan, parallel at a time (at least 1),
// and returns them in task order; the first failure stops starting
// tasks and is returned. Tasks already committed cost one GET each. It
// does not seal: call Seal. A plan made while the stage is written forms
// its groups first, in order, and fails with ErrGroupNotReady while a
// group's workers have not all committed.
func (s *Stage) RunAll(ctx context.Context, parallel int) ([]*Task, error) {
	n := 0
	if s.plan != nil {
		n = s.plan.Tasks()
	} else if s.combined != nil {
		n = len(s.combined.Workers)
	}
	if s.overlap != nil && s.plan != nil {
		// Groups form in order, each from the workers committed after
		// the last group's: a group not ready stops the run.
		for g := range s.plan.Groups {
			if _, err := s.FormGroup(ctx, g, nil); err != nil {
				return nil, err
			}
		}
	}
	out := make([]*Task, n)
	eg, gctx := errgroup.WithContext(ctx)
	eg.SetLimit(max(1, parallel))
	for i := range n {
		if gctx.Err() != nil {
			break
		}
		eg.Go(func() (err error) {
			defer safe.Recover(&err, "combine task %d of %s stage %d", i, s.query, s.stage)
			out[i], err = s.RunTask(gctx, i)
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	return out, ctx.Err()
}
