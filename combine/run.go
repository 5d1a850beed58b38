package combine

import (
	"context"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/durashuffle/durashuffle/internal/safe"
)

// RunAll runs every task of the plan, parallel at a time (at least 1),
// and returns them in task order; the first failure stops starting
// tasks and is returned. Tasks laid out on disk run only as many at
// once as their expected bytes fit in Options.ScratchBytes (one at
// least). Tasks already committed cost one GET each. It does not seal:
// call Seal.
//
// A plan made while the stage is written runs its tasks group by group,
// in group order, forming each group (FormGroup) when its first task
// comes up: a group's worker manifests, frames included, are held from
// then until its last task ends, and its tasks load them once, so that
// the run holds the groups under way rather than every group of the
// stage: about parallel / buckets + 2 while tasks take alike (a group
// forms while the tasks before it still run), at most parallel + 1. A group whose workers have not all committed stops the run
// there with ErrGroupNotReady; the tasks of the groups before it stay
// committed, and a later run finds them at one GET each.
func (s *Stage) RunAll(ctx context.Context, parallel int) ([]*Task, error) {
	n := 0
	if s.plan != nil {
		n = s.plan.Tasks()
	} else if s.combined != nil {
		n = len(s.combined.Workers)
	}
	overlapped := s.overlap != nil && s.plan != nil
	out := make([]*Task, n)
	eg, gctx := errgroup.WithContext(ctx)
	eg.SetLimit(max(1, parallel))
	disk := s.diskRoom()
	var formErr error
	for k := range n {
		if gctx.Err() != nil {
			break
		}
		i := k
		if overlapped {
			// Group-major: task n is group n % G, bucket n / G.
			G := len(s.plan.Groups)
			g, j := k/len(s.plan.Buckets), k%len(s.plan.Buckets)
			if i = j*G + g; j == 0 {
				if _, formErr = s.FormGroup(gctx, g, nil); formErr != nil {
					break
				}
			}
		}
		eg.Go(func() (err error) {
			defer safe.Recover(&err, "combine task %d of %s stage %d", i, s.query, s.stage)
			if w := s.diskWeight(i); disk != nil && w > 0 {
				if err := disk.Acquire(gctx, w); err != nil {
					return context.Cause(gctx)
				}
				defer disk.Release(w)
			}
			out[i], err = s.RunTask(gctx, i)
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	if formErr != nil {
		return nil, formErr
	}
	return out, ctx.Err()
}

// diskRoom is the room of the plan's Scratch that its tasks on disk take
// while they run, or nil when it is not bounded.
func (s *Stage) diskRoom() *semaphore.Weighted {
	if s.plan == nil || s.plan.opts.Scratch == nil || s.plan.opts.ScratchBytes <= 0 {
		return nil
	}
	return semaphore.NewWeighted(s.plan.opts.ScratchBytes)
}

// diskWeight is task n's expected bytes on disk, at most ScratchBytes (a
// task larger than the room runs alone, and its Scratch says whether it
// fits), or 0 when it holds its bytes in memory.
func (s *Stage) diskWeight(n int) int64 {
	p := s.plan
	if p == nil || n >= len(p.TaskBytes) || !p.onDisk(p.TaskBytes[n]) {
		return 0
	}
	return min(p.TaskBytes[n], p.opts.ScratchBytes)
}
