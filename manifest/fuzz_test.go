package manifest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/store"
)

// manifestSeeds adds valid worker and stage manifests and hostile variants:
// wrong types, huge and negative numbers, frames past their object, deep
// nesting, other versions.
func manifestSeeds(f *testing.F) {
	f.Helper()
	w := sample()
	wb, _ := w.Encode()
	s, err := merge("q1", 2, []*Worker{sample()})
	if err != nil {
		f.Fatal(err)
	}
	s.Workers[0].Worker = "3"
	sb, _ := s.Encode()
	for _, b := range [][]byte{wb, sb} {
		f.Add(b)
		f.Add(b[:len(b)/2])
		for _, r := range []struct{ old, new string }{
			{`"format_version":"1.0"`, `"format_version":"2.0"`},
			{`"format_version":"1.0"`, `"format_version":"1.99999999999999999999"`},
			{`"partitions":4`, `"partitions":1099511627776`},
			{`"partitions":4`, `"partitions":-1`},
			{`"partitions":4`, `"partitions":1e400`},
			{`"offset":100`, `"offset":9223372036854775807`},
			{`"length":200`, `"length":9223372036854775807`},
			{`"size":300`, `"size":-300`},
			{`"object":0`, `"object":7`},
			{`"frames":[`, `"frames":[{},`},
			{`"kind":"worker"`, `"kind":"stage"`},
			{`"kind":"stage"`, `"kind":"worker"`},
			{`"query":"q1"`, `"query":"../q1"`},
			{`"key":"worker-3/attempt-a1/data-0.arrows"`, `"key":"../../other/data"`},
			{`"schema":"AQID"`, `"schema":"!!!"`},
			{`"workers":[`, `"workers":[null,`},
		} {
			if bytes.Contains(b, []byte(r.old)) {
				f.Add(bytes.Replace(b, []byte(r.old), []byte(r.new), 1))
			}
		}
	}
	// Binary containers (version 2): whole, cut short, with lengths,
	// the offset table and entries overwritten.
	w.FormatVersion, w.Kind = FormatVersion, KindWorker
	cb, err := w.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cb)
	for _, n := range []int{4, 8, len(cb) / 2, len(cb) - EntrySize, len(cb) - 1} {
		f.Add(cb[:n])
	}
	hl := int(binary.LittleEndian.Uint32(cb[4:]))
	for _, at := range []int{4, 8 + hl, 8 + hl + 4, 8 + hl + 16, 8 + hl + 20, 8 + hl + 24, 8 + hl + 28, 8 + hl + 44, len(cb) - 8} {
		for _, v := range []uint32{0, 1, 5, 1 << 31, 0xffffffff} {
			c := bytes.Clone(cb)
			binary.LittleEndian.PutUint32(c[at:], v)
			f.Add(c)
		}
	}
	f.Add([]byte(`{"format_version":"1.0","kind":"worker"}`))
	f.Add([]byte(`{"format_version":"1.0","kind":"stage","partitions":1,"workers":[{}]}`))
	f.Add([]byte(strings.Repeat("[", 10000)))
	f.Add([]byte(`{"format_version":1}`))
	f.Add([]byte("null"))
	f.Add([]byte{})
}

// decodeErr checks that a decode failure is classified.
func decodeErr(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
		t.Fatalf("error %v is neither ErrCorrupt nor ErrVersion", err)
	}
}

// wellFormed checks what a reader relies on in a manifest that decoded: every
// frame inside its object, partitions in range and bounded, keys that do
// not climb out of the stage.
func wellFormed(t *testing.T, w *Worker) {
	t.Helper()
	if w.Partitions < 1 || w.Partitions > MaxPartitions {
		t.Fatalf("decoded %d partitions", w.Partitions)
	}
	for i, f := range w.Frames {
		if f.Partition < 0 || f.Partition >= w.Partitions || f.Object < 0 || f.Object >= len(w.Objects) {
			t.Fatalf("frame %d: %+v outside the manifest", i, f)
		}
		o := w.Objects[f.Object]
		if f.Offset < 0 || f.Length <= 0 || f.Offset+f.Length > o.Size || f.Offset+f.Length < f.Offset {
			t.Fatalf("frame %d [%d, +%d) outside object of %d bytes", i, f.Offset, f.Length, o.Size)
		}
	}
	for _, o := range w.Objects {
		if strings.Contains(o.Key, "..") || o.Key == "" {
			t.Fatalf("object key %q", o.Key)
		}
	}
}

// FuzzDecodeWorker: DecodeWorker either fails with a classified error or
// returns a manifest that is safe to read with and that re-encodes to
// itself. Each input is decoded as it is, which the checksums refuse
// unless the mutation missed them, and with its checksums recomputed
// (fixWorkerCRCs), so the lengths, offset table and entries behind them
// are fuzzed too.
func FuzzDecodeWorker(f *testing.F) {
	manifestSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeWorkerOK(t, b)
		decodeWorkerOK(t, fixWorkerCRCs(b))
	})
}

func decodeWorkerOK(t *testing.T, b []byte) {
	t.Helper()
	{
		w, err := DecodeWorker("fuzz", b)
		if err != nil {
			decodeErr(t, err)
			return
		}
		wellFormed(t, w)
		again, err := w.Encode()
		if err != nil {
			t.Fatal(err)
		}
		w2, err := DecodeWorker("re-encoded", again)
		if err != nil {
			t.Fatalf("a decoded manifest does not decode again: %v", err)
		}
		if b2, _ := w2.Encode(); !bytes.Equal(again, b2) {
			t.Fatalf("round trip changed the manifest:\n%s\n%s", again, b2)
		}
	}
}

// FuzzDecodeStage: the same for stage manifests, as they are and with
// their checksum recomputed (fixStageCRC).
func FuzzDecodeStage(f *testing.F) {
	manifestSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeStageOK(t, b)
		decodeStageOK(t, fixStageCRC(b))
	})
}

func decodeStageOK(t *testing.T, b []byte) {
	t.Helper()
	{
		s, err := DecodeStage("fuzz", b)
		if err != nil {
			decodeErr(t, err)
			return
		}
		if s.Partitions < 1 || s.Partitions > MaxPartitions {
			t.Fatalf("decoded %d partitions", s.Partitions)
		}
		for i := range s.Workers {
			if s.Workers[i].Partitions != s.Partitions {
				t.Fatalf("worker %d has %d partitions, stage %d", i, s.Workers[i].Partitions, s.Partitions)
			}
			wellFormed(t, &s.Workers[i])
		}
		again, err := s.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeStage("re-encoded", again); err != nil {
			t.Fatalf("a decoded stage does not decode again: %v", err)
		}
	}
}

// indexSeeds adds a sealed stage's manifest and index, whole and damaged.
func indexSeeds(f *testing.F) {
	f.Helper()
	ctx := context.Background()
	st := &store.Mem{}
	ids := synthStage(f, st, testLayout, "q", 3, 6, 2)
	s, err := Seal(ctx, st, testLayout, "q", 0, ids)
	if err != nil {
		f.Fatal(err)
	}
	mb, _ := st.Bytes(testLayout.StageManifestKey("q", 0))
	ib, _ := st.Bytes(testLayout.ObjectKey("q", 0, s.Index.Key))
	f.Add(mb, ib, []byte{})
	f.Add(mb, ib, []byte{0})
	f.Add(mb, ib, []byte{5, 0, 2})
	f.Add(mb, ib[:len(ib)/2], []byte{3})
	f.Add(mb[:len(mb)/2], ib, []byte{})
	for at := 8; at < 8+6*EntrySize; at += 4 {
		c := bytes.Clone(ib)
		binary.LittleEndian.PutUint32(c[at:], 0xfffffff0)
		f.Add(mb, c, []byte{1, 2})
	}
	f.Add(bytes.Replace(mb, []byte(`"entries":36`), []byte(`"entries":4294967295`), 1), ib, []byte{})
	f.Add(bytes.Replace(mb, []byte(`"partitions":6`), []byte(`"partitions":1048576`), 1), ib, []byte{})
}

// FuzzDecodeIndex: for any stage manifest and index object bytes, the
// stage decodes or fails classified, and Frames and Summary of any
// partition set fail with ErrCorrupt or return entries that are safe:
// partitions in the set and in delivery order, workers in range, every
// frame inside its object. Each input is read as it is and with the
// manifest's checksums recomputed from the fuzzed index (fixIndexCRCs),
// so the index's structural checks are fuzzed past the checksums.
func FuzzDecodeIndex(f *testing.F) {
	indexSeeds(f)
	f.Fuzz(func(t *testing.T, mb, ib, parts []byte) {
		readIndexOK(t, mb, ib, parts)
		if fixed, err := fixIndexCRCs(mb, ib); err == nil {
			readIndexOK(t, fixed, ib, parts)
		}
	})
}

func readIndexOK(t *testing.T, mb, ib, parts []byte) {
	t.Helper()
	l := testLayout
	{
		s, err := DecodeStage("fuzz", mb)
		if err != nil {
			decodeErr(t, err)
			return
		}
		// The index is read from where the manifest says, with the fuzzed
		// bytes.
		mem := &store.Mem{}
		mem.Set(l.ObjectKey(s.Query, s.Stage, s.Index.Key), ib)
		var ps []int
		for _, p := range parts {
			ps = append(ps, int(p)%s.Partitions)
		}
		slices.Sort(ps)
		ps = slices.Compact(ps)
		if len(parts) == 0 {
			ps = nil
		}
		fs, err := s.Frames(context.Background(), mem, l, ps)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !store.IsNotFound(err) && !errors.Is(err, store.ErrInvalidRange) {
				t.Fatalf("unclassified error: %v", err)
			}
		}
		for i, fr := range fs {
			if ps != nil && !slices.Contains(ps, fr.Partition) || fr.Partition < 0 || fr.Partition >= s.Partitions {
				t.Fatalf("frame %d of partition %d, asked for %v", i, fr.Partition, ps)
			}
			if i > 0 && (fs[i-1].Partition > fr.Partition || fs[i-1].Partition == fr.Partition && fs[i-1].Worker > fr.Worker) {
				t.Fatalf("frame %d out of order", i)
			}
			if fr.Worker < 0 || fr.Worker >= len(s.Workers) {
				t.Fatalf("frame %d names worker %d of %d", i, fr.Worker, len(s.Workers))
			}
			if err := checkFrame(&fr, s.Workers[fr.Worker].Objects); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
		}
		sum, err := s.Summary(context.Background(), mem, l)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !store.IsNotFound(err) && !errors.Is(err, store.ErrInvalidRange) {
				t.Fatalf("unclassified summary error: %v", err)
			}
			return
		}
		if len(sum) != s.Partitions {
			t.Fatalf("summary of %d partitions, stage has %d", len(sum), s.Partitions)
		}
	}
}
