package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/hostile"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestWriteRefusesCorruptInput: on every backend, `write -i -` of each
// hostile Arrow stream of internal/testkit/hostile (a zero-column schema with a
// 5-row batch, a negative first string offset, list offsets past the
// child, string and list offsets that decrease) exits 1, the code of a
// failure, naming the input batch and the column (the schema, for the
// zero-column one), without a panic (before, the partitioning read the
// corrupt offsets and the command panicked). It does so into one
// partition, where Write refuses the batch, and partitioned by another
// column, where the split refuses it before it copies the corrupt one. It
// leaves no worker manifest, object or open upload, and the same worker's
// good write after it commits.
func TestWriteRefusesCorruptInput(t *testing.T) {
	cases := hostile.Cases()
	if len(cases) < 5 {
		t.Fatalf("internal/testkit/hostile has %d cases, want the zero-column schema and the four offset corruptions", len(cases))
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			tg := newTarget(t, b)
			st, _ := tg.ep.NewStore(t)
			ctx := context.Background()
			l := manifest.Layout{Prefix: "durashuffle"}
			for i, c := range cases {
				q := fmt.Sprintf("corrupt-%d", i)
				wants := []string{"input batch 1", "invalid record batch", c.Want}
				modes := [][]string{{"--partitions", "1"}}
				if c.Column == "" {
					wants = append(wants, "the schema")
				} else {
					// Column 0 is id; the corrupt one is another.
					wants = append(wants, "column", c.Column)
					modes = append(modes, []string{"--partitions", "4", "--partition-by", "id"})
				}
				for _, mode := range modes {
					r := tg.run(t, c.Stream, append([]string{"write", "-q", q, "-w", "0", "-i", "-"}, mode...)...)
					if r.code != exitFailure {
						t.Fatalf("%s, %s: exit %d, want %d:\n%s", c.Name, mode, r.code, exitFailure, r.stderr)
					}
					for _, want := range wants {
						if !strings.Contains(r.stderr, want) {
							t.Errorf("%s, %s: stderr lacks %q:\n%s", c.Name, mode, want, r.stderr)
						}
					}
					if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
						t.Errorf("%s, %s: the command panicked:\n%s", c.Name, mode, r.stderr)
					}
					if _, err := manifest.LoadWorker(ctx, st, l, q, 0, "0"); !store.IsNotFound(err) {
						t.Fatalf("%s, %s: worker manifest after the refused write: %v, want none", c.Name, mode, err)
					}
					if objs, _, err := st.List(ctx, l.Root()+q+"/", ""); err != nil || len(objs) != 0 {
						t.Fatalf("%s, %s: objects after the refused write: %v, %v", c.Name, mode, objs, err)
					}
					if ups, err := st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
						t.Fatalf("%s, %s: open uploads after the refused write: %v, %v", c.Name, mode, ups, err)
					}
				}
				// The refusals left nothing in the way of the worker's
				// next attempt.
				tg.run(t, hostile.Stream(hostile.Schema, hostile.Good()), "write", "-q", q, "-w", "0", "-i", "-",
					"--partitions", "4", "--partition-by", "id").must(t)
				m, err := manifest.LoadWorker(ctx, st, l, q, 0, "0")
				if err != nil || m.Totals.Rows != hostile.GoodRows {
					t.Fatalf("%s: the good write after the refused ones: %v rows, %v; want %d rows", c.Name, m, err, hostile.GoodRows)
				}
			}
		})
	}
}

// TestWriteRefusesHostileHeaders: an IPC stream whose schema message
// says it holds 3,000,000,000 fields (arrow-go's reader would allocate
// them before it reads one and the process would end out of memory) is
// refused with an error naming the count, and nothing is stored.
func TestWriteRefusesHostileHeaders(t *testing.T) {
	b := backends[0]
	tg := newTarget(t, b)
	st, _ := tg.ep.NewStore(t)
	ctx := context.Background()
	l := manifest.Layout{Prefix: "durashuffle"}
	for i, c := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"huge field count", hostile.HugeFieldCount(), "3000000000 elements"},
	} {
		q := fmt.Sprintf("headers-%d", i)
		r := tg.run(t, c.stream, "write", "-q", q, "-w", "0", "--partitions", "1", "-i", "-")
		if r.code != exitFailure {
			t.Fatalf("%s: exit %d, want %d:\n%s", c.name, r.code, exitFailure, r.stderr)
		}
		if !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: stderr lacks %q:\n%s", c.name, c.want, r.stderr)
		}
		if objs, _, err := st.List(ctx, l.Root()+q+"/", ""); err != nil || len(objs) != 0 {
			t.Fatalf("%s: objects after the refused write: %v, %v", c.name, objs, err)
		}
	}
}
