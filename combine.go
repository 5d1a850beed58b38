package durashuffle

import (
	"context"
	"fmt"

	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/manifest"
)

// Combine opens a sealed stage for combining (package combine): it reads
// the stage manifest and its index's summary and plans J partition
// buckets by G writer groups. Run the plan's tasks anywhere (RunTask, or
// RunAll in this process), then Seal: from then on OpenStage, and every
// reader of the stage, reads the combined objects, G GETs per partition
// range instead of one per writer object. The readers' options of the
// client's configuration (read_range_bytes, read_ahead) are the plan's
// for its predictions unless o sets them. A stage already combined is
// returned with Combined set; its tasks and seal are no-ops.
//
// With spill on, a task of more than o.MemoryBytes (512 MiB) lays its
// object out in a file in spill_dir, counted against spill_bytes, rather
// than in memory, and RunAll runs no more such tasks at once than
// spill_bytes holds.
//
// Tasks and the seal commit with If-None-Match, so the commit guard is
// checked first, as for Seal.
func (c *Client) Combine(ctx context.Context, query string, stage int, o combine.Options) (*combine.Stage, error) {
	if err := c.CheckCommitGuard(ctx); err != nil {
		return nil, fmt.Errorf("combine %s stage %d: %w", query, stage, err)
	}
	ro := c.ReaderOptions()
	if o.ReaderRangeBytes == 0 {
		o.ReaderRangeBytes = ro.RangeBytes
	}
	if o.ReaderSpanBytes == 0 {
		o.ReaderSpanBytes = ro.SpanBytes
	}
	if o.ReaderReadAhead == 0 {
		o.ReaderReadAhead = ro.ReadAhead
	}
	if o.Scratch == nil && c.spill != nil {
		o.Scratch = combineScratch{c.spill}
		if o.ScratchBytes == 0 {
			o.ScratchBytes = c.spill.limit
		}
	}
	return combine.Open(ctx, c.st, c.layout, query, stage, o)
}

// SealCombined seals a stage (Seal, of workers 0..workers-1) and then
// combines it in this process, parallel tasks at a time, when its plan
// says combining pays (Plan.Predict.Pays): the common case in one call.
// It returns the stage manifest readers now read, and the plan: when the
// manifest's Combines is nil the stage was not combined, and the plan's
// Predict says why (the requests and dollars with and without). A plan
// made while the stage was written (o.Expected) is always finished:
// its tasks have run, or begun. A stage combined already is returned as
// it is, with no plan.
func (c *Client) SealCombined(ctx context.Context, query string, stage, workers, parallel int, o combine.Options) (*manifest.Stage, *combine.Plan, error) {
	m, err := c.Seal(ctx, query, stage, workers)
	if err != nil || m.Combines != nil {
		return m, nil, err
	}
	s, err := c.Combine(ctx, query, stage, o)
	if err != nil {
		return nil, nil, err
	}
	p := s.Plan()
	if p == nil {
		return s.Combined(), nil, nil
	}
	if !p.Predict.Pays && !p.Overlap {
		return m, p, nil
	}
	if _, err := s.RunAll(ctx, parallel); err != nil {
		return nil, p, err
	}
	cm, err := s.Seal(ctx)
	return cm, p, err
}

// combineScratch lays out combine tasks larger than
// combine.Options.MemoryBytes in the client's spill directory, counted
// against spill_bytes with its writers' spill.
type combineScratch struct{ s *spillDir }

func (c combineScratch) Create(size int64, what string) (combine.ScratchFile, error) {
	d, err := c.s.get()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return d.CreateSized(size, what)
}
