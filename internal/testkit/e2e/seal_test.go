package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

func TestSeal(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		c := testenv.Client(t, testConfig(), durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		for _, worker := range []string{"0", "1", "3"} {
			w, _ := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Stage: 1, Worker: worker, Partitions: 4})
			if err := writeRows(w, 2000, 4); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		_, err := c.Seal(ctx, "q", 1, 5)
		if !errors.Is(err, manifest.ErrMissingWorkers) || !strings.Contains(err.Error(), "2 of 5 workers have no manifest: 2, 4") {
			t.Fatalf("seal of 5: %v", err)
		}
		if _, err := manifest.LoadStageManifest(ctx, st, c.Layout(), "q", 1); !store.IsNotFound(err) {
			t.Fatalf("a failed seal wrote a stage manifest: %v", err)
		}
		s, err := manifest.Seal(ctx, st, c.Layout(), "q", 1, []string{"3", "1", "0"})
		if err != nil {
			t.Fatal(err)
		}
		if s.Totals.Rows != 6000 || len(s.Workers) != 3 || s.Workers[2].Worker != "3" {
			t.Fatalf("sealed %+v", s.Totals)
		}
		again, err := manifest.Seal(ctx, st, c.Layout(), "q", 1, []string{"0", "1", "3"})
		if err != nil || again.Totals != s.Totals {
			t.Fatalf("second seal with the same attempts: %v", err)
		}
		before := counter.Requests()
		loaded, err := manifest.LoadStage(ctx, st, c.Layout(), "q", 1)
		if err != nil || !loaded.Sealed {
			t.Fatalf("load: %v", err)
		}
		if d := store.Diff(counter.Requests(), before); fmt.Sprint(d) != "map[GetObject:1]" {
			t.Fatalf("opening a sealed stage cost %v, want one GET", d)
		}
		stages, err := manifest.ListStages(ctx, st, c.Layout(), "q")
		if err != nil || len(stages) != 1 || !stages[0].Sealed || stages[0].Workers != 3 {
			t.Fatalf("stages %+v %v", stages, err)
		}
	})
}
