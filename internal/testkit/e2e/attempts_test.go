package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
)

// TestRacingAttemptsCommitOnce runs four attempts of the same worker at
// once against MinIO, each writing rows that say which attempt wrote them,
// and lets them all commit at the same moment: exactly one manifest, the
// losers' objects deleted, no upload left open, and readers see only the
// winner's rows, every one of them.
func TestRacingAttemptsCommitOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, counter := testenv.MinIO(t).NewStore(t)
	// Spill off: each attempt's object goes in chunk-sized parts, so the
	// attempts race through multipart uploads (with spill on, four
	// objects sharing the pool each take one part).
	cfg := uploadingConfig()
	cfg.Hedge.Factor = 0
	c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
	defer c.Close()
	const (
		attempts   = 4
		rows       = 6000 // ~6 MiB each: two parts of a multipart upload
		partitions = 3
		base       = 1_000_000 // attempt a writes ids a*base + [0, rows)
	)
	writers := make([]*durashuffle.Writer, attempts)
	for a := range attempts {
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "race", Worker: "7", Attempt: fmt.Sprintf("a%d", a), Partitions: partitions})
		if err != nil {
			t.Fatal(err)
		}
		writers[a] = w
	}
	var wg sync.WaitGroup
	for a, w := range writers {
		wg.Go(func() {
			for lo := 0; lo < rows; lo += 250 {
				rec := batch(a*base+lo, 250)
				err := w.Write((lo/250)%partitions, rec)
				rec.Release()
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Commit all at once.
	start := make(chan struct{})
	errs := make([]error, attempts)
	for a, w := range writers {
		wg.Go(func() {
			<-start
			_, errs[a] = w.Commit(ctx)
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for a, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("attempts a%d and a%d both committed", winner, a)
			}
			winner = a
		case !errors.Is(err, manifest.ErrAlreadyCommitted):
			t.Fatalf("attempt a%d: %v, want ErrAlreadyCommitted", a, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no attempt committed: %v", errs)
	}
	for a, err := range errs {
		if a != winner && !strings.Contains(err.Error(), fmt.Sprintf("attempt a%d won, attempt a%d lost", winner, a)) {
			t.Fatalf("loser a%d's error does not name the winner: %v", a, err)
		}
	}
	t.Logf("attempt a%d won; the others: %v", winner, errs)

	// Exactly one manifest, and only the winner's data.
	l := c.Layout()
	objs, _, err := st.List(ctx, l.StagePrefix("race", 0), "")
	if err != nil {
		t.Fatal(err)
	}
	var manifests, data int
	for _, o := range objs {
		switch {
		case o.Key == l.WorkerManifestKey("race", 0, "7"):
			manifests++
		case strings.HasPrefix(o.Key, l.AttemptPrefix("race", 0, "7", fmt.Sprintf("a%d", winner))):
			data++
		default:
			t.Fatalf("left behind: %s", o.Key)
		}
	}
	m, err := manifest.LoadWorker(ctx, st, l, "race", 0, "7")
	if err != nil || manifests != 1 || m.Attempt != fmt.Sprintf("a%d", winner) || data != len(m.Objects) || m.Totals.Parts < 2 {
		t.Fatalf("manifests %d, data objects %d, manifest %+v: %v", manifests, data, m, err)
	}
	if ups, err := st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Fatalf("uploads left open: %v %v", ups, err)
	}

	// Readers see the winner's rows, all of them, and nothing else.
	s, err := c.OpenStage(ctx, "race", 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.ReadPartitions(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	seen := make([]bool, rows)
	n := 0
	for recs.Next() {
		ids := recs.RecordBatch().Column(0).(*array.Int64)
		for i := range ids.Len() {
			id := int(ids.Value(i))
			if id/base != winner || seen[id%base] {
				t.Fatalf("read id %d: not the winner's (a%d) or read twice", id, winner)
			}
			seen[id%base] = true
			n++
		}
	}
	if err := recs.Err(); err != nil || n != rows {
		t.Fatalf("read %d rows, want %d: %v", n, rows, err)
	}
}
