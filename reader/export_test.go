package reader

import (
	"context"
	"slices"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// RowsBefore exposes the test helper to the package's external tests.
var RowsBefore = rowsBefore

// WithFrames returns a copy of a sealed stage's manifest whose workers
// hold their frames, read from its index (by partition, write order
// within a partition), as an unsealed stage's do.
func WithFrames(ctx context.Context, st store.Reader, l manifest.Layout, m *manifest.Stage) (*manifest.Stage, error) {
	fs, err := m.Frames(ctx, st, l, nil)
	if err != nil {
		return nil, err
	}
	c := *m
	c.Workers = slices.Clone(m.Workers)
	for _, f := range fs {
		w := &c.Workers[f.Worker]
		f.Worker = 0
		w.Frames = append(w.Frames, f)
	}
	return &c, nil
}
