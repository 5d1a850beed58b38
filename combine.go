package durashuffle

import (
	"context"
	"fmt"

	"github.com/durashuffle/durashuffle/combine"
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
	if o.ReaderReadAhead == 0 {
		o.ReaderReadAhead = ro.ReadAhead
	}
	return combine.Open(ctx, c.st, c.layout, query, stage, o)
}
