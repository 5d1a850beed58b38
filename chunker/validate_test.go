package chunker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/internal/testkit/hostile"
)

// TestValidateColumnMatchesArrow: the allocation-free check of flat
// columns refuses exactly what array.ValidateFull refuses, over valid
// arrays of every type it handles (sliced too) and thousands of seeded
// corruptions of them: bytes flipped in any buffer (offsets, validity,
// values, multi-byte UTF-8), buffers cut short or dropped, null counts,
// offsets and lengths off by a little. The one difference is on purpose:
// a non-empty boolean array without its values bitmap, which Arrow
// passes and then cannot read.
func TestValidateColumnMatchesArrow(t *testing.T) {
	mem := memory.DefaultAllocator
	// Multi-byte UTF-8, and ASCII alone (checked in one pass, however
	// it is split).
	wordSets := [][]string{{"", "a", "héllo", "中文字", "🙂🙂", "plain ascii text", "ÿ"}, {"", "a", "plain ascii text", "0123456789"}}
	var cols []arrow.Array
	for _, words := range wordSets {
		for _, dt := range []arrow.DataType{
			arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64,
			arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64, arrow.PrimitiveTypes.Date32, arrow.FixedWidthTypes.Timestamp_us,
			arrow.FixedWidthTypes.Boolean, arrow.BinaryTypes.String, arrow.BinaryTypes.Binary, arrow.BinaryTypes.LargeString,
			arrow.BinaryTypes.LargeBinary,
		} {
			for _, nulls := range []bool{false, true} {
				b := array.NewBuilder(mem, dt)
				for i := range 40 {
					if nulls && i%5 == 2 {
						b.AppendNull()
						continue
					}
					w := words[i%len(words)]
					switch b := b.(type) {
					case *array.StringBuilder:
						b.Append(w)
					case *array.LargeStringBuilder:
						b.Append(w)
					case *array.BinaryBuilder: // large binary too
						b.Append([]byte(w))
					default:
						if err := b.AppendValueFromString(fmt.Sprint(i % 2)); err != nil {
							t.Fatalf("%s: %v", dt, err)
						}
					}
				}
				a := b.NewArray()
				b.Release()
				cols = append(cols, a, array.NewSlice(a, 3, 31))
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var cases, refused int
	for _, c := range cols {
		check := func(what string, a arrow.Array) {
			t.Helper()
			cases++
			want := arrowValidateFull(a)
			got := validateColumn(a)
			if want == nil && a.DataType().ID() == arrow.BOOL && a.Len() > 0 && a.Data().Buffers()[1] == nil {
				want = errors.New("no values bitmap") // stricter on purpose
			}
			if (got == nil) != (want == nil) {
				t.Fatalf("%s %s (offset %d, %d values): validateColumn says %v, array.ValidateFull says %v", c.DataType(), what, a.Data().Offset(), a.Len(), got, want)
			}
			if got != nil {
				refused++
			}
		}
		check("valid", c)
		for range 400 {
			what, a := corrupt(rng, c)
			if a != nil {
				check(what, a)
				a.Release()
			}
		}
	}
	t.Logf("%d arrays, %d refused by both", cases, refused)
	if refused < cases/4 || refused == cases {
		t.Fatalf("%d of %d arrays refused: the corruptions do not exercise both answers", refused, cases)
	}
	for _, c := range cols {
		c.Release()
	}
}

// TestCountSet: the null count check's bit count agrees with Arrow's
// over every offset and length of random bitmaps.
func TestCountSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		b := make([]byte, 1+rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		for off := 0; off < 8*len(b); off++ {
			for n := 0; off+n <= 8*len(b); n++ {
				if got, want := countSet(b, off, n), bitutil.CountSetBits(b, off, n); got != want {
					t.Fatalf("bits [%d, %d) of %x: %d set, Arrow counts %d", off, off+n, b, got, want)
				}
			}
		}
	}
}

// arrowValidateFull is array.ValidateFull with a panic as its refusal:
// Arrow's check itself slices past the values of a string whose offsets
// rise past the end and then fall back.
func arrowValidateFull(a arrow.Array) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("array.ValidateFull panicked: %v", r)
		}
	}()
	return array.ValidateFull(a)
}

// corrupt returns a copy of a's data with one seeded corruption, as an
// array, or nil if Arrow cannot even make an array of it (it panics).
func corrupt(rng *rand.Rand, a arrow.Array) (what string, out arrow.Array) {
	d := a.Data().(*array.Data)
	bufs := make([]*memory.Buffer, len(d.Buffers()))
	for i, b := range d.Buffers() {
		if b != nil {
			bufs[i] = memory.NewBufferBytes(bytes.Clone(b.Bytes()))
		}
	}
	off, n, nulls := d.Offset(), d.Len(), d.NullN()
	i := rng.IntN(len(bufs))
	switch k := rng.IntN(8); {
	case k <= 2 && bufs[i] != nil && bufs[i].Len() > 0: // flip bytes
		b := bufs[i].Bytes()
		for range 1 + rng.IntN(3) {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		}
		what = fmt.Sprintf("buffer %d flipped", i)
	case k == 3 && bufs[i] != nil: // cut short
		bufs[i] = memory.NewBufferBytes(bufs[i].Bytes()[:rng.IntN(bufs[i].Len()+1)])
		what = fmt.Sprintf("buffer %d cut to %d bytes", i, bufs[i].Len())
	case k == 4:
		bufs[i] = nil
		what = fmt.Sprintf("buffer %d dropped", i)
	case k == 5:
		nulls = rng.IntN(n+3) - 1
		what = fmt.Sprintf("null count %d", nulls)
	case k == 6:
		off += rng.IntN(5) - 2
		what = fmt.Sprintf("offset %d", off)
	default:
		n += rng.IntN(5) - 2
		what = fmt.Sprintf("length %d", n)
	}
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	nd := array.NewData(d.DataType(), n, bufs, nil, nulls, off)
	defer nd.Release()
	return what, array.MakeFromData(nd)
}

// TestWriteRefusesHostileBatches: every hostile case is refused by Write
// with ErrBatch naming the partition, the column and the reason; the
// writer keeps what it had, and what it had decodes.
func TestWriteRefusesHostileBatches(t *testing.T) {
	for _, c := range hostile.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			bad, err := c.Batch()
			if err != nil {
				t.Fatal(err)
			}
			defer bad.Release()
			sink := newSink(t, 100_000, 4)
			o := opts(4)
			if c.Column != "" {
				o.Schema = hostile.Schema
			}
			w, err := New(context.Background(), o, sink)
			if err != nil {
				t.Fatal(err)
			}
			good := hostile.Good()
			defer good.Release()
			if c.Column != "" {
				if err := w.Write(1, good); err != nil {
					t.Fatal(err)
				}
			}
			err = w.Write(3, bad)
			if !errors.Is(err, ErrBatch) {
				t.Fatalf("Write: %v, want ErrBatch", err)
			}
			for _, want := range []string{"batch for partition 3", c.Column, c.Want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			res, err := w.Close()
			if err != nil {
				t.Fatalf("Close after a refused batch: %v", err)
			}
			want := int64(hostile.GoodRows) // the good batch's alone
			if c.Column == "" {
				want = 0 // the zero-column case writes no good batch
			}
			if res.Rows != want {
				t.Fatalf("closed with %d rows, want %d", res.Rows, want)
			}
		})
	}
}

// panicky is a batch that panics where the chunker uses it after
// validation: in Retain (under the writer's lock, when a large batch is
// kept rather than copied) or, once armed, in Column (in an encoder), or
// in Release (after the encoder is done with it).
type panicky struct {
	arrow.RecordBatch
	inRetain  bool
	armed     atomic.Bool
	inRelease atomic.Bool
}

func (p *panicky) Release() {
	if p.inRelease.Load() {
		panic("release of a hostile batch")
	}
	p.RecordBatch.Release()
}

func (p *panicky) Retain() {
	if p.inRetain {
		panic("retain of a hostile batch")
	}
	p.RecordBatch.Retain()
}

func (p *panicky) Column(i int) arrow.Array {
	if p.armed.Load() {
		panic("column of a hostile batch")
	}
	return p.RecordBatch.Column(i)
}

func (p *panicky) Columns() []arrow.Array {
	if p.armed.Load() {
		panic("columns of a hostile batch")
	}
	return p.RecordBatch.Columns()
}

// TestPanicInWriteReleasesTheLock: a panic inside Write, with the
// writer's lock held, fails the writer with a PanicError instead of
// unwinding through the caller; the lock is free, so the next Write
// returns the failure and Abort returns (the caller's deferred Abort no
// longer deadlocks).
func TestPanicInWriteReleasesTheLock(t *testing.T) {
	sink := newSink(t, 100_000, 4)
	w, err := New(context.Background(), opts(4), sink)
	if err != nil {
		t.Fatal(err)
	}
	big := rows(memory.DefaultAllocator, 0, 2000) // > a quarter frame: retained, not copied
	defer big.Release()
	err = w.Write(2, &panicky{RecordBatch: big, inRetain: true})
	var pe *safe.PanicError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "partition 2") || !strings.Contains(err.Error(), "retain of a hostile batch") || len(pe.Stack) == 0 {
		t.Fatalf("Write: %v, want a PanicError naming the partition and the panic, with a stack", err)
	}
	small := rows(memory.DefaultAllocator, 0, 3)
	defer small.Release()
	if err := w.Write(0, small); !errors.As(err, &pe) {
		t.Fatalf("Write after the panic: %v, want the writer's failure", err)
	}
	ended(t, "Abort", func() { w.Abort(errors.New("aborted after a panic")) })
}

// TestPanicInEncoderFailsTheWriter: a panic in an encoder goroutine fails
// the writer (Close returns a PanicError) instead of ending the process.
func TestPanicInEncoderFailsTheWriter(t *testing.T) {
	sink := newSink(t, 100_000, 4)
	w, err := New(context.Background(), opts(4), sink)
	if err != nil {
		t.Fatal(err)
	}
	// Two batches of a quarter frame or more, less than a frame
	// together: retained, and gathered into one frame at Close (outside
	// the IPC writer, which recovers its own panics).
	var ps []*panicky
	for i := range 2 {
		rec := rows(memory.DefaultAllocator, i*1000, 1000)
		defer rec.Release()
		ps = append(ps, &panicky{RecordBatch: rec})
		if err := w.Write(1, ps[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		p.armed.Store(true)
	}
	var cerr error
	ended(t, "Close", func() { _, cerr = w.Close() })
	var pe *safe.PanicError
	if !errors.As(cerr, &pe) || !strings.Contains(cerr.Error(), "encode of a frame of partition 1") {
		t.Fatalf("Close: %v, want a PanicError of the encoder", cerr)
	}
}

// TestPanicInReleaseFailsTheWriter: a batch whose Release panics when
// the encoder lets go of it fails the writer (Close returns a
// PanicError) instead of ending the process.
func TestPanicInReleaseFailsTheWriter(t *testing.T) {
	sink := newSink(t, 100_000, 4)
	w, err := New(context.Background(), opts(4), sink)
	if err != nil {
		t.Fatal(err)
	}
	rec := rows(memory.DefaultAllocator, 0, 2000) // > a quarter frame: retained, not copied
	defer rec.Release()
	p := &panicky{RecordBatch: rec}
	if err := w.Write(3, p); err != nil {
		t.Fatal(err)
	}
	p.inRelease.Store(true)
	var cerr error
	ended(t, "Close", func() { _, cerr = w.Close() })
	var pe *safe.PanicError
	if !errors.As(cerr, &pe) || !strings.Contains(cerr.Error(), "panic in release of the batches of a frame of partition 3: release of a hostile batch") {
		t.Fatalf("Close: %v, want a PanicError of the release", cerr)
	}
}

// ended fails the test unless f returns within a generous bound.
func ended(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return within 30 s", what)
	}
}
