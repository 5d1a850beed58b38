package manifest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/store"
)

// Test helpers that recompute the checksums of a damaged object, so that
// the structural checks behind them (lengths, offset tables, entries)
// stay tested and fuzzed: a lie with valid checksums is what a buggy
// writer would store.

// fixWorkerCRCs recomputes a worker manifest container's checksums from
// its bytes: the table's and the entry blocks' (in the header, which is
// rewritten with them when it is a JSON object), then the header's. What
// is too short or not JSON is left as it is.
func fixWorkerCRCs(b []byte) []byte {
	if len(b) < workerPreamble || string(b[:4]) != workerMagic {
		return b
	}
	hl := int64(binary.LittleEndian.Uint32(b[4:]))
	if hl > int64(len(b)-workerPreamble) {
		return b
	}
	h := b[workerPreamble : workerPreamble+hl]
	rest := b[workerPreamble+hl:]
	var m map[string]json.RawMessage
	var w Worker
	if json.Unmarshal(h, &m) == nil && m != nil && json.Unmarshal(h, &w) == nil &&
		w.Partitions >= 1 && w.Partitions <= MaxPartitions && len(rest) >= 4*(w.Partitions+1) {
		table, entries := rest[:4*(w.Partitions+1)], rest[4*(w.Partitions+1):]
		block := w.EntryBlock
		if block < 1 || block > maxEntryBlock {
			block = workerEntryBlock
		}
		entries = entries[:len(entries)/EntrySize*EntrySize]
		m["table_crc32c"] = json.RawMessage(strconv.FormatUint(uint64(crc32c(table)), 10))
		m["entry_block"] = json.RawMessage(strconv.Itoa(block))
		crcs, _ := json.Marshal(blockSums(entries, block, 0, 0))
		m["entry_crcs"] = crcs
		if nh, err := json.Marshal(m); err == nil {
			h = nh
		}
	}
	out := append([]byte(workerMagic), binary.LittleEndian.AppendUint32(nil, uint32(len(h)))...)
	out = binary.LittleEndian.AppendUint32(out, headerCRC(out, h))
	out = append(out, h...)
	return append(out, rest...)
}

// fixStageCRC gives a stage manifest the checksum its bytes have: the
// trailer is replaced (or added to a JSON object that has none).
func fixStageCRC(b []byte) []byte {
	if n := len(b) - stageTrailerLen; n > 0 && bytes.HasPrefix(b[n:], []byte(stageTrailerHead)) {
		b = append(b[:n:n], '}')
	}
	if len(b) < 2 || b[len(b)-1] != '}' {
		return b
	}
	return appendStageCRC(b)
}

// fixIndexCRCs rewrites a stage manifest's index checksums (entry blocks
// and summary) to those of the index object ib, where the manifest says
// its sections are, and then the manifest's own checksum.
func fixIndexCRCs(mb, ib []byte) ([]byte, error) {
	body := mb
	if n := len(mb) - stageTrailerLen; n > 0 {
		body = append(mb[:n:n], '}')
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if m["index"] == nil {
		return fixStageCRC(mb), nil
	}
	var x Index
	if err := json.Unmarshal(m["index"], &x); err != nil {
		return nil, err
	}
	var xm map[string]json.RawMessage
	if err := json.Unmarshal(m["index"], &xm); err != nil {
		return nil, err
	}
	if x.EntryBlock < 1 || x.EntryBlock > maxEntryBlock {
		return nil, fmt.Errorf("entry_block %d", x.EntryBlock)
	}
	end := min(int64(len(ib)), x.EntriesOffset+EntrySize*x.Entries)
	if x.EntriesOffset > end || x.EntriesOffset < 0 {
		return nil, fmt.Errorf("entries at %d of %d bytes", x.EntriesOffset, len(ib))
	}
	crcs := blockSums(ib[x.EntriesOffset:end], x.EntryBlock, crc32c(ib[:x.EntriesOffset]), 1)
	xm["entry_crcs"], _ = json.Marshal(crcs)
	if x.SummaryOffset >= 0 && x.SummaryOffset <= int64(len(ib)) {
		xm["summary_crc32c"] = json.RawMessage(strconv.FormatUint(uint64(crc32c(ib[x.SummaryOffset:])), 10))
	}
	m["index"], _ = json.Marshal(xm)
	nb, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return appendStageCRC(nb), nil
}

// TestFlipEveryByte flips each byte of each metadata object of a sealed
// stage of 3 workers x 10 partitions x 7 frames, one at a time: every reader of the
// byte fails with ErrCorrupt naming the object (never another), and, for
// a checksummed region, the byte range that failed. The worker manifest
// is read whole (LoadWorker) and by seal (its head, then its entries by
// range; every 7th byte, for time); the stage manifest by LoadStageManifest; the index by Frames
// (its preamble and entries) and Summary.
func TestFlipEveryByte(t *testing.T) {
	ctx := context.Background()
	base := &store.Mem{}
	ids := synthStage(t, base, testLayout, "q", 3, 10, 7) // 70 entries a worker: 2 blocks of 64
	good, err := Seal(ctx, base, testLayout, "q", 0, ids)
	if err != nil {
		t.Fatal(err)
	}
	mkey := testLayout.StageManifestKey("q", 0)
	ikey := testLayout.ObjectKey("q", 0, good.Index.Key)
	wkey := testLayout.WorkerManifestKey("q", 0, "1")
	clone := func() *store.Mem {
		st := &store.Mem{}
		for _, k := range []string{mkey, ikey, wkey, testLayout.WorkerManifestKey("q", 0, "0"), testLayout.WorkerManifestKey("q", 0, "2")} {
			b, _ := base.Bytes(k)
			st.Set(k, b)
		}
		return st
	}
	wantCorrupt := func(t *testing.T, what string, at int, err error, key string) {
		t.Helper()
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), key) {
			t.Fatalf("%s, byte %d flipped: %v, want ErrCorrupt naming %s", what, at, err, key)
		}
		for _, other := range []string{mkey, ikey, wkey} {
			if other != key && strings.Contains(err.Error(), other) {
				t.Fatalf("%s, byte %d flipped: %v names %s", what, at, err, other)
			}
		}
	}
	flip := func(st *store.Mem, key string, at int) {
		b, _ := base.Bytes(key)
		b = bytes.Clone(b)
		b[at] ^= 0x10
		st.Set(key, b)
	}

	w, _ := base.Bytes(wkey)
	for at := range w {
		st := clone()
		flip(st, wkey, at)
		_, err := LoadWorker(ctx, st, testLayout, "q", 0, "1")
		wantCorrupt(t, "LoadWorker", at, err, wkey)
		if at%7 != 0 && at > 16 {
			continue // seal is slower: every 7th byte past the preamble
		}
		_ = st.Delete(ctx, mkey)
		_, err = Seal(ctx, st, testLayout, "q", 0, ids)
		wantCorrupt(t, "Seal", at, err, wkey)
		if at >= 4 && !strings.Contains(err.Error(), "bytes [") {
			t.Fatalf("Seal, byte %d flipped: %v names no byte range", at, err)
		}
	}
	m, _ := base.Bytes(mkey)
	for at := range m {
		st := clone()
		flip(st, mkey, at)
		_, err := LoadStageManifest(ctx, st, testLayout, "q", 0)
		wantCorrupt(t, "LoadStageManifest", at, err, mkey)
	}
	x, _ := base.Bytes(ikey)
	for at := range x {
		st := clone()
		flip(st, ikey, at)
		s, err := LoadStage(ctx, st, testLayout, "q", 0)
		if err != nil {
			t.Fatal(err)
		}
		if at < int(good.Index.SummaryOffset) {
			_, err = s.Frames(ctx, st, testLayout, nil)
		} else {
			_, err = s.Summary(ctx, st, testLayout)
		}
		wantCorrupt(t, "index", at, err, ikey)
		if !strings.Contains(err.Error(), "bytes [") || !strings.Contains(err.Error(), "has CRC32C") {
			t.Fatalf("index, byte %d flipped: %v names no byte range", at, err)
		}
	}
}

// TestVersion2Refused: a stage sealed, or a worker committed, by a
// version 2 writer (no checksums) is refused with ErrVersion, not read
// unchecked.
func TestVersion2Refused(t *testing.T) {
	ctx := context.Background()
	st := &store.Mem{}
	ids := synthStage(t, st, testLayout, "q", 2, 4, 1)
	s, err := Seal(ctx, st, testLayout, "q", 0, ids)
	if err != nil {
		t.Fatal(err)
	}
	// A 2.1 stage manifest: the JSON without the trailer, version 2.1.
	mkey := testLayout.StageManifestKey("q", 0)
	b, _ := st.Bytes(mkey)
	v2 := bytes.Replace(b[:len(b)-stageTrailerLen], []byte(`"format_version":"3.1"`), []byte(`"format_version":"2.1"`), 1)
	st.Set(mkey, append(v2, '}'))
	_, err = LoadStage(ctx, st, testLayout, "q", 0)
	if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), `format_version "2.1"; this reader understands 3.x`) {
		t.Fatalf("2.1 stage manifest: %v", err)
	}
	// A DSM2 worker manifest, unsealed and to seal.
	_ = st.Delete(ctx, mkey, testLayout.ObjectKey("q", 0, s.Index.Key))
	wkey := testLayout.WorkerManifestKey("q", 0, "0")
	w, _ := st.Bytes(wkey)
	w = bytes.Clone(w)
	copy(w, "DSM2")
	st.Set(wkey, w)
	for name, f := range map[string]func() error{
		"unsealed stage": func() error { _, err := LoadStage(ctx, st, testLayout, "q", 0); return err },
		"seal":           func() error { _, err := Seal(ctx, st, testLayout, "q", 0, ids); return err },
	} {
		if err := f(); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), wkey) || !strings.Contains(err.Error(), "format 2 worker manifest without checksums; this reader understands 3.x") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
