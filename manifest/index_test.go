package manifest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// synthWorker builds worker w's manifest of a stage: frames frames of
// each partition in turn (write order: partition-major within each round
// of frames, so a partition's frames are not adjacent in write order),
// rows and sizes derived from (w, p, i) so every entry is distinct.
func synthWorker(query string, stage, w, partitions, frames int) *Worker {
	id := fmt.Sprint(w)
	m := &Worker{Query: query, Stage: stage, Worker: id, Attempt: "a" + id, Schema: []byte("schema"),
		Compression: "lz4", Partitions: partitions, ChunkSize: 8 << 20, WriterVersion: "test",
		WrittenAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	var off int64
	for i := range frames {
		for p := range partitions {
			n := int64(1 + (w+p+i)%7)
			m.Frames = append(m.Frames, Frame{Partition: p, Object: 0, Offset: off, Length: 10 * n, Rows: n, Bytes: 40 * n, CRC32C: uint32(w<<20 | p<<4 | i)})
			off += 10 * n
		}
	}
	m.Objects = []Object{{Key: DataName(id, m.Attempt, "00000000000000ab", 0), Size: off, Parts: 1, CRC32C: 7}}
	return m
}

// synthStage commits workers synthetic worker manifests to st.
func synthStage(t testing.TB, st store.Store, l Layout, query string, workers, partitions, frames int) []string {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, workers)
	for w := range workers {
		ids[w] = fmt.Sprint(w)
		if _, err := Commit(ctx, st, l, synthWorker(query, 0, w, partitions, frames)); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

var testLayout = Layout{Prefix: "t"}

// TestIndexRoundTrip: a sealed stage's index gives, for any partition
// set, exactly the frames the worker manifests hold, in delivery order,
// and the same per-partition summary.
func TestIndexRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := &store.Mem{}
	ids := synthStage(t, st, testLayout, "q", 5, 37, 3)
	unsealed, err := LoadStage(ctx, st, testLayout, "q", 0)
	if err != nil || unsealed.Sealed || unsealed.Index != nil {
		t.Fatalf("unsealed stage: %v %+v", err, unsealed)
	}
	s, err := Seal(ctx, st, testLayout, "q", 0, ids)
	if err != nil {
		t.Fatal(err)
	}
	if s.Totals != unsealed.Totals || s.Totals.Frames != 5*37*3 {
		t.Fatalf("sealed totals %+v, unsealed %+v", s.Totals, unsealed.Totals)
	}
	sealed, err := LoadStage(ctx, st, testLayout, "q", 0)
	if err != nil || !sealed.Sealed || sealed.Index == nil {
		t.Fatalf("sealed stage: %v", err)
	}
	for _, w := range sealed.Workers {
		if w.Frames != nil || w.Totals.Frames != 37*3 || w.Query != "q" || string(w.Schema) != "schema" || w.Partitions != 37 {
			t.Fatalf("sealed worker %s: %+v", w.Worker, w)
		}
	}
	for _, ps := range [][]int{nil, {0}, {36}, {5, 6, 7}, {0, 36}, {1, 3, 30}} {
		want, _ := unsealed.Frames(ctx, st, testLayout, ps)
		got, err := sealed.Frames(ctx, st, testLayout, ps)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) || len(got) == 0 {
			t.Fatalf("partitions %v: %d frames from the index, %d from the worker manifests", ps, len(got), len(want))
		}
		for i := 1; i < len(got); i++ {
			a, b := got[i-1], got[i]
			if a.Partition > b.Partition || a.Partition == b.Partition && (a.Worker > b.Worker || a.Worker == b.Worker && a.Offset > b.Offset) {
				t.Fatalf("partitions %v: frame %d %+v after %+v", ps, i, b, a)
			}
		}
	}
	want, _ := unsealed.Summary(ctx, st, testLayout)
	got, err := sealed.Summary(ctx, st, testLayout)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("summary %v: %v, want %v", err, got, want)
	}

	// Sealing again is a no-op; sealing other workers is a conflict.
	again, err := Seal(ctx, st, testLayout, "q", 0, ids)
	if err != nil || again.Index.Key != sealed.Index.Key {
		t.Fatalf("seal again: %v (index %v, first %s)", err, again, sealed.Index.Key)
	}
	if _, err := Seal(ctx, st, testLayout, "q", 0, ids[:3]); !errors.Is(err, ErrSealConflict) {
		t.Fatalf("seal of fewer workers: %v", err)
	}
	objs, _, _ := st.List(ctx, testLayout.StagePrefix("q", 0), "/")
	var indexes int
	for _, o := range objs {
		if strings.Contains(o.Key, "/index-") {
			indexes++
		}
	}
	if indexes != 1 {
		t.Fatalf("%d index objects after three seals, want 1", indexes)
	}
	if _, err := Seal(ctx, st, testLayout, "q", 0, append(ids, "9")); !errors.Is(err, ErrMissingWorkers) || !strings.Contains(err.Error(), "1 of 6 workers have no manifest: 9") {
		t.Fatalf("seal with a missing worker: %v", err)
	}
}

// TestSealRace: of two seals racing, the loser deletes its index and
// returns the winner's stage.
func TestSealRace(t *testing.T) {
	ctx := context.Background()
	st := &store.Mem{}
	ids := synthStage(t, st, testLayout, "q", 3, 8, 1)
	type res struct {
		s   *Stage
		err error
	}
	out := make(chan res, 4)
	for range 4 {
		go func() {
			s, err := Seal(ctx, st, testLayout, "q", 0, ids)
			out <- res{s, err}
		}()
	}
	var keys []string
	for range 4 {
		r := <-out
		if r.err != nil {
			t.Fatal(r.err)
		}
		keys = append(keys, r.s.Index.Key)
	}
	if len(slices.Compact(keys)) != 1 {
		t.Fatalf("seals returned different indexes: %v", keys)
	}
	objs, _, _ := st.List(ctx, testLayout.StagePrefix("q", 0), "/")
	for _, o := range objs {
		if strings.Contains(o.Key, "/index-") && !strings.HasSuffix(o.Key, keys[0]) {
			t.Fatalf("a losing seal left %s", o.Key)
		}
	}
}

// TestSealStreams: a stage whose entries exceed one block is merged in
// several blocks and uploaded in several parts, and reads back the same.
func TestSealStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 80 MiB of entries")
	}
	ctx := context.Background()
	st := &store.Mem{}
	// 40 workers x 4096 partitions x 11 frames = 1.8 M entries, 86 MiB.
	ids := synthStage(t, st, testLayout, "q", 40, 4096, 11)
	s, err := Seal(ctx, st, testLayout, "q", 0, ids)
	if err != nil {
		t.Fatal(err)
	}
	if s.Index.Size < sealBlockBytes {
		t.Fatalf("index of %d bytes is too small to test streaming", s.Index.Size)
	}
	for _, p := range []int{0, 2047, 2048, 4095} {
		fs, err := s.Frames(ctx, st, testLayout, []int{p})
		if err != nil || len(fs) != 40*11 {
			t.Fatalf("partition %d: %d frames, %v", p, len(fs), err)
		}
		w, err := LoadWorker(ctx, st, testLayout, "q", 0, "17")
		if err != nil {
			t.Fatal(err)
		}
		var mine []Frame
		for _, f := range fs {
			if f.Worker == 17 {
				f.Worker = 0
				mine = append(mine, f)
			}
		}
		var want []Frame
		for _, f := range w.Frames {
			if f.Partition == p {
				want = append(want, f)
			}
		}
		if !slices.Equal(mine, want) {
			t.Fatalf("partition %d worker 17: %v, want %v", p, mine, want)
		}
	}
}

// TestOnePartitionMetadata: opening a sealed stage of 16 workers x 4096
// partitions and listing one partition's frames takes 2 GETs and moves
// the stage manifest plus that partition's entries, not the stage's.
func TestOnePartitionMetadata(t *testing.T) {
	ctx := context.Background()
	st := &store.Mem{}
	const workers, partitions, frames = 16, 4096, 2
	ids := synthStage(t, st, testLayout, "q", workers, partitions, frames)
	if _, err := Seal(ctx, st, testLayout, "q", 0, ids); err != nil {
		t.Fatal(err)
	}
	mb, _ := st.Bytes(testLayout.StageManifestKey("q", 0))
	for _, p := range []int{0, 1234, partitions - 1} {
		g0, b0 := st.Gets()
		s, err := LoadStage(ctx, st, testLayout, "q", 0)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := s.Frames(ctx, st, testLayout, []int{p})
		if err != nil || len(fs) != workers*frames {
			t.Fatalf("partition %d: %d frames, %v", p, len(fs), err)
		}
		g1, b1 := st.Gets()
		gets, moved := g1-g0, b1-b0
		// The partition's entries, widened to the checksum blocks that
		// hold them.
		want := int64(len(mb)) + blockSpan(s.Index, s.Index.at(p), s.Index.at(p+1))
		t.Logf("partition %d: %d GETs, %d bytes (stage manifest %d, entries %d in blocks of %d bytes; the whole index is %d)", p, gets, moved, len(mb), workers*frames*EntrySize, blockSpan(s.Index, s.Index.at(p), s.Index.at(p+1)), s.Index.Size)
		if gets != 2 || moved != want {
			t.Fatalf("partition %d: %d GETs of %d bytes, want 2 of %d", p, gets, moved, want)
		}
		if moved > 128<<10 {
			t.Fatalf("partition %d: %d bytes of metadata", p, moved)
		}
	}
	// A range of partitions is one GET of its entries too.
	s, _ := LoadStage(ctx, st, testLayout, "q", 0)
	g0, b0 := st.Gets()
	fs, err := s.Frames(ctx, st, testLayout, []int{100, 101, 102, 103, 110})
	g1, b1 := st.Gets()
	if err != nil || len(fs) != 5*workers*frames || g1-g0 != 1 || b1-b0 != blockSpan(s.Index, s.Index.at(100), s.Index.at(111)) {
		t.Fatalf("range: %d frames, %d GETs, %d bytes, %v", len(fs), g1-g0, b1-b0, err)
	}
}

// blockSpan is the bytes a reader of the index entries [from, to) fetches:
// the whole checksum blocks that hold them.
func blockSpan(x *Index, from, to int64) int64 {
	k := int64(x.EntryBlock)
	off, _ := x.blockBytes(from / k)
	_, end := x.blockBytes((to+k-1)/k - 1)
	return end - off
}

// TestVersion1Refused: a stage sealed, or a worker committed, by a
// version 1 writer (JSON, frames inline) is refused with ErrVersion
// naming both versions.
func TestVersion1Refused(t *testing.T) {
	ctx := context.Background()
	st := &store.Mem{}
	v1Worker := `{"format_version":"1.0","kind":"worker","query":"q","stage":0,"worker":"0","attempt":"a","schema":"","compression":"lz4","partitions":2,"chunk_size":8388608,"objects":[],"frames":[],"totals":{}}`
	st.Set(testLayout.WorkerManifestKey("q", 0, "0"), []byte(v1Worker))
	for name, f := range map[string]func() error{
		"unsealed stage": func() error { _, err := LoadStage(ctx, st, testLayout, "q", 0); return err },
		"worker":         func() error { _, err := LoadWorker(ctx, st, testLayout, "q", 0, "0"); return err },
		"seal":           func() error { _, err := Seal(ctx, st, testLayout, "q", 0, []string{"0"}); return err },
	} {
		err := f()
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), `format_version "1.0"`) || !strings.Contains(err.Error(), "understands 3.x") {
			t.Errorf("%s: %v, want ErrVersion naming 1.0 and 3.x", name, err)
		}
	}
	st.Set(testLayout.StageManifestKey("q", 0), []byte(`{"format_version":"1.0","kind":"stage","query":"q","stage":0,"partitions":2,"workers":[`+v1Worker+`]}`))
	_, err := LoadStage(ctx, st, testLayout, "q", 0)
	if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), `format_version "1.0"`) || !strings.Contains(err.Error(), "understands 3.x") {
		t.Fatalf("sealed v1 stage: %v", err)
	}
}

// TestIndexHostile: an index or stage manifest that lies is refused with
// ErrCorrupt naming the key and the numbers, without allocating for the
// lie.
func TestIndexHostile(t *testing.T) {
	ctx := context.Background()
	base := &store.Mem{}
	ids := synthStage(t, base, testLayout, "q", 3, 10, 2)
	good, err := Seal(ctx, base, testLayout, "q", 0, ids)
	if err != nil {
		t.Fatal(err)
	}
	ikey := testLayout.ObjectKey("q", 0, good.Index.Key)
	index, _ := base.Bytes(ikey)
	mb, _ := base.Bytes(testLayout.StageManifestKey("q", 0))

	entry := func(i int) int { return int(good.Index.EntriesOffset) + EntrySize*i }
	patch := func(b []byte, at int, v uint32) []byte {
		b = slices.Clone(b)
		binary.LittleEndian.PutUint32(b[at:], v)
		return b
	}
	withIndex := func(f func(x *Index)) []byte {
		s := *good
		x := *good.Index
		x.First = slices.Clone(x.First)
		f(&x)
		s.Index = &x
		b, err := s.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name     string
		manifest []byte
		index    []byte
		want     string // in the error; empty: decode of the manifest fails
	}{
		{"truncated index", mb, index[:entry(7)], "ends at byte 344 of block 0 (bytes [0, 2888) asked for)"},
		{"entry of another partition", mb, patch(index, entry(0), 5), "entry 0 has partition 5, the offset table says 0"},
		{"worker out of range", mb, patch(index, entry(1)+4, 1000), "entry 1 names worker 1000 of 3"},
		{"workers out of order", mb, patch(index, entry(0)+4, 2), "entry 1 names worker 0 of 3 (after worker 2)"},
		{"object out of range", mb, patch(index, entry(2)+8, 4), "names object 4 of 1"},
		{"frame past its object", mb, patch(patch(index, entry(3)+16, 0xffffffff), entry(3)+20, 0x7fffffff), "lies outside object"},
		{"table of the wrong size", withIndex(func(x *Index) { x.First = x.First[:8] }), index, "offset table of 8 bytes, want 44 for 10 partitions"},
		{"table that falls", withIndex(func(x *Index) { binary.LittleEndian.PutUint32(x.First[8:], 1<<31) }), index, "offset table falls"},
		{"entries beyond totals", withIndex(func(x *Index) { binary.LittleEndian.PutUint32(x.First[40:], 1<<30); x.Entries = 1 << 30 }), index, "offset table holds 1073741824 entries, index says 1073741824, totals 60 frames"},
		{"sizes that do not add up", withIndex(func(x *Index) { x.Size = 1 << 40 }), index, "do not fit an object of 1099511627776 bytes"},
		{"escaping key", withIndex(func(x *Index) { x.Key = "../../other/index.bin" }), index, "climbs out of the stage"},
		{"no index", []byte(strings.Replace(string(mb), `"index":`, `"xindex":`, 1)), index, "has no index"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &store.Mem{}
			st.Set(ikey, tc.index)
			// Checksums that match the lie: the structural checks behind
			// them are what is tested here.
			fixed, err := fixIndexCRCs(tc.manifest, tc.index)
			if err != nil {
				t.Fatal(err)
			}
			st.Set(testLayout.StageManifestKey("q", 0), fixed)
			s, err := LoadStage(ctx, st, testLayout, "q", 0)
			if err == nil {
				_, err = s.Frames(ctx, st, testLayout, nil)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrCorrupt containing %q", err, tc.want)
			}
		})
	}
	// A damaged summary is refused by Summary.
	st := &store.Mem{}
	damaged := patch(index, int(good.Index.SummaryOffset)+24, 99)
	st.Set(ikey, damaged)
	fixed, err := fixIndexCRCs(mb, damaged)
	if err != nil {
		t.Fatal(err)
	}
	st.Set(testLayout.StageManifestKey("q", 0), fixed)
	s, err := LoadStage(ctx, st, testLayout, "q", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Summary(ctx, st, testLayout); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "partition 0 has") {
		t.Fatalf("damaged summary: %v", err)
	}
}

// TestWorkerContainerHostile: a worker manifest that lies about its
// lengths is refused before anything is allocated for them.
func TestWorkerContainerHostile(t *testing.T) {
	w := synthWorker("q", 0, 0, 4, 2)
	w.FormatVersion, w.Kind, w.Totals = FormatVersion, KindWorker, w.Sum()
	b, err := w.Encode()
	if err != nil {
		t.Fatal(err)
	}
	hl := int(binary.LittleEndian.Uint32(b[4:]))
	table := workerPreamble + hl
	patch := func(at int, v uint32) []byte {
		c := slices.Clone(b)
		binary.LittleEndian.PutUint32(c[at:], v)
		return c
	}
	// lie patches a table or an entry and gives the header the checksums
	// of the lie: the structural checks behind them are tested.
	lie := func(at int, v uint32) []byte { return fixWorkerCRCs(patch(at, v)) }
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "shorter than the 12-byte preamble"},
		{"huge header", patch(4, 1<<31), "header of 2147483648 bytes, at most"},
		{"header past the end", patch(4, uint32(len(b))), "its head needs"},
		{"truncated entries", b[:len(b)-1], "bytes of entries, its offset table says 8 entries (384 bytes)"},
		{"extra bytes", append(slices.Clone(b), 0), "bytes of entries"},
		{"table that falls", lie(table+8, 0), "offset table falls"},
		{"table beyond totals", lie(table+16, 1<<30), "offset table holds 1073741824 entries, totals say 8 frames"},
		{"entry of another partition", lie(table+20, 3), "has partition 3 worker 0, the offset table says partition 0"},
		{"entry naming a worker", lie(table+20+4, 1), "worker 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeWorker("m", tc.in)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrCorrupt containing %q", err, tc.want)
			}
		})
	}
}
