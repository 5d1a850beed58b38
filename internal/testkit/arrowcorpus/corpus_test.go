package arrowcorpus_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/testkit/arrowcorpus"
)

// hasType says whether dt is of type id or holds one at any depth.
func hasType(dt arrow.DataType, id arrow.Type) bool {
	if dt.ID() == id {
		return true
	}
	switch t := dt.(type) {
	case *arrow.DictionaryType:
		return hasType(t.ValueType, id)
	case arrow.ExtensionType:
		return hasType(t.StorageType(), id)
	case arrow.NestedType:
		for _, f := range t.Fields() {
			if hasType(f.Type, id) {
				return true
			}
		}
	}
	return false
}

// TestCasesAreValid: every batch of every case has the case's schema
// and passes arrow-go's full validation, but for the one layout its
// validator does not know (run-end encoded arrays from its own builder
// have no buffers; the validator wants one), and the corpus releases all
// it allocates.
func TestCasesAreValid(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	cases := arrowcorpus.Cases(mem)
	defer arrowcorpus.Release(cases)
	names := map[string]bool{}
	for _, c := range cases {
		if names[c.Name] {
			t.Errorf("case %q twice", c.Name)
		}
		names[c.Name] = true
		for i, b := range c.Batches {
			if !b.Schema().Equal(c.Schema) {
				t.Errorf("%s batch %d: schema %s, case %s", c.Name, i, b.Schema(), c.Schema)
			}
			for j, col := range b.Columns() {
				err := array.ValidateFull(col)
				if err != nil && !(hasType(col.DataType(), arrow.RUN_END_ENCODED) && strings.Contains(err.Error(), "expected at least 1 buffers")) {
					t.Errorf("%s batch %d column %d (%s): %v", c.Name, i, j, col.DataType(), err)
				}
			}
		}
	}
	if len(cases) < 20 {
		t.Fatalf("%d cases", len(cases))
	}
}

// TestDiff: each case equals a second build of itself; no batch, a
// value changed, a null for a value, another dictionary value and a
// metadata change are each found and named.
func TestDiff(t *testing.T) {
	cases := arrowcorpus.Cases(memory.DefaultAllocator)
	defer arrowcorpus.Release(cases)
	again := arrowcorpus.Cases(memory.DefaultAllocator)
	defer arrowcorpus.Release(again)
	for k, c := range cases {
		sc, got := again[k].Schema, again[k].Batches
		if err := arrowcorpus.Diff(c.Schema, c.Batches, sc, got); err != nil {
			t.Errorf("%s: against itself: %v", c.Name, err)
		}
		if c.Rows() > 0 {
			if err := arrowcorpus.Diff(c.Schema, c.Batches, sc, nil); err == nil || err.Error() != "row 0: written, but only 0 rows were read back" {
				t.Errorf("%s: no batches: %v", c.Name, err)
			}
		}
	}

	sc := arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, {Name: "d", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}, Nullable: true}}, nil)
	rec := func(js string) arrow.RecordBatch {
		b, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(js))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	want := []arrow.RecordBatch{rec(`[{"k": 1, "d": "a"}, {"k": 2, "d": "b"}]`)}
	for _, tc := range []struct{ got, err string }{
		{`[{"k": 1, "d": "a"}, {"k": 3, "d": "b"}]`, `row 1 column 0 "k" (int64): 3, want 2`},
		{`[{"k": 1, "d": "a"}, {"k": null, "d": "b"}]`, `row 1 column 0 "k" (int64): null, want a value`},
		{`[{"k": 1, "d": "c"}, {"k": 2, "d": "b"}]`, `row 0 column 1 "d" (dictionary<values=utf8, indices=int8, ordered=false>): dictionary value: c, want a`},
	} {
		got := rec(tc.got)
		err := arrowcorpus.Diff(sc, want, sc, []arrow.RecordBatch{got})
		if err == nil || err.Error() != tc.err {
			t.Errorf("%s: %v, want %q", tc.got, err, tc.err)
		}
		got.Release()
	}
	md := arrow.NewMetadata([]string{"a"}, []string{"b"})
	if err := arrowcorpus.DiffSchema(sc, arrow.NewSchema(sc.Fields(), &md)); err == nil || !strings.Contains(err.Error(), "schema metadata") {
		t.Errorf("metadata added: %v", err)
	}
}
