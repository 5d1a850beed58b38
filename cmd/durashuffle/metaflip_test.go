package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestMetadataFlips flips one byte in each region of each metadata object
// of a stage (the stage manifest, the stage index, a worker manifest),
// one at a time, directly in the store, on every backend: each command
// that reads the region (read, seal, inspect; gc, which reports what it
// could not judge and leaves it alone) fails with a corrupt manifest
// error naming that object's key and the byte range whose checksum did
// not match, and never blames another object. ls lists keys and reads no
// manifest.
func TestMetadataFlips(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			metadataFlips(t, b)
		})
	}
}

func metadataFlips(t *testing.T, b backend) {
	tg := newTarget(t, b)
	st, _ := tg.ep.NewStore(t)
	ctx := context.Background()
	l := manifest.Layout{Prefix: "durashuffle"}
	const sealed, open = "flips", "flips-open"
	in := arrowStream(t, testBatches(t, 0, 2000, 500))
	for _, q := range []string{sealed, open} {
		for w := range 2 {
			tg.run(t, in, "write", "-q", q, "-w", strconv.Itoa(w), "--partitions", "4", "--partition-by", "id").must(t)
		}
	}
	tg.run(t, nil, "seal", "-q", sealed, "--workers", "2").must(t)
	m, err := manifest.LoadStageManifest(ctx, st, l, sealed, 0)
	if err != nil {
		t.Fatal(err)
	}
	stageKey := l.StageManifestKey(sealed, 0)
	indexKey := l.ObjectKey(sealed, 0, m.Index.Key)
	workerKey := l.WorkerManifestKey(open, 0, "0")
	get := func(key string) []byte {
		t.Helper()
		body, err := st.GetRange(ctx, key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer body.Close()
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	orig := map[string][]byte{stageKey: get(stageKey), indexKey: get(indexKey), workerKey: get(workerKey)}
	at := func(key, s string) int {
		i := bytes.Index(orig[key], []byte(s))
		if i < 0 {
			t.Fatalf("%s lacks %q", key, s)
		}
		return i + len(s)
	}
	hl := int(binary.LittleEndian.Uint32(orig[workerKey][4:]))

	read := func(q string) []string { return []string{"read", "-q", q, "--format", "jsonl"} }
	inspect := func(q string) []string { return []string{"inspect", "-q", q} }
	gc := []string{"gc", "--older-than", "0s", "--dry-run"}
	seal := []string{"seal", "-q", open, "--workers", "2"}
	type check struct {
		args []string
		want []string // in stderr (exit 1), or, for gc, in stdout (exit 0)
	}
	crc := func(key string, args ...[]string) []check {
		var out []check
		for _, a := range args {
			out = append(out, check{a, []string{"corrupt manifest", key, "bytes [", "has CRC32C"}})
		}
		return out
	}
	cases := []struct {
		object, region string
		key            string
		at             int
		xor            byte
		checks         []check
	}{
		{"stage manifest", "JSON body", stageKey, at(stageKey, `"query":"`), 0x01, crc(stageKey, read(sealed), inspect(sealed), gc)},
		{"stage manifest", "index offset table (first)", stageKey, at(stageKey, `"first":"`) + 2, 0x01, crc(stageKey, read(sealed), inspect(sealed), gc)},
		{"stage manifest", "index block checksums", stageKey, at(stageKey, `"entry_crcs":"`) + 1, 0x01, crc(stageKey, read(sealed), inspect(sealed), gc)},
		{"stage manifest", "checksum trailer", stageKey, len(orig[stageKey]) - 19, 0x01, []check{
			{read(sealed), []string{"corrupt manifest", stageKey, "does not end with its checksum"}},
			{inspect(sealed), []string{"corrupt manifest", stageKey, "does not end with its checksum"}},
			{gc, []string{"corrupt manifest", stageKey, "does not end with its checksum"}}}},
		{"stage index", "preamble", indexKey, 1, 0xff, crc(indexKey, read(sealed))},
		{"stage index", "entry (a frame's offset)", indexKey, int(m.Index.EntriesOffset) + manifest.EntrySize*int(m.Index.Entries-1) + 16, 0x01, crc(indexKey, read(sealed))},
		{"stage index", "summary", indexKey, int(m.Index.SummaryOffset) + 3, 0x01, crc(indexKey, inspect(sealed))},
		{"worker manifest", "magic", workerKey, 0, 0xff, []check{
			{read(open), []string{"corrupt manifest", workerKey, "not the magic", "(bytes [0, 4))"}},
			{seal, []string{"corrupt manifest", workerKey, "not the magic", "(bytes [0, 4))"}},
			{inspect(open), []string{"corrupt manifest", workerKey, "not the magic", "(bytes [0, 4))"}},
			{gc, []string{"corrupt manifest", workerKey, "not the magic", "(bytes [0, 4))"}}}},
		{"worker manifest", "header length", workerKey, 4, 0x01, crc(workerKey, read(open), seal, inspect(open), gc)},
		{"worker manifest", "header JSON", workerKey, 12 + 10, 0x01, crc(workerKey, read(open), seal, inspect(open), gc)},
		{"worker manifest", "offset table", workerKey, 12 + hl + 4, 0x01, crc(workerKey, read(open), seal, inspect(open), gc)},
		{"worker manifest", "entries", workerKey, len(orig[workerKey]) - manifest.EntrySize + 16, 0x01, crc(workerKey, read(open), seal, inspect(open), gc)},
	}
	for _, tc := range cases {
		t.Run(tc.object+"/"+tc.region, func(t *testing.T) {
			bad := bytes.Clone(orig[tc.key])
			bad[tc.at] ^= tc.xor
			if err := st.Put(ctx, tc.key, bad, store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := st.Put(ctx, tc.key, orig[tc.key], store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}()
			for _, c := range tc.checks {
				before := listing(t, st)
				r := tg.run(t, nil, c.args...)
				out := r.stderr
				if c.args[0] == "gc" {
					r.must(t)
					out = r.stdout
				} else if r.code != 1 {
					t.Fatalf("%s: exit %d, want 1\n%s", c.args[0], r.code, r.stderr)
				}
				for _, w := range c.want {
					if !strings.Contains(out, w) {
						t.Fatalf("%s: output lacks %q:\n%s", c.args[0], w, out)
					}
				}
				t.Logf("%s %s, byte %d ^ %#x: %s: %s", tc.object, tc.region, tc.at, tc.xor, c.args[0], firstLineWith(out, "corrupt manifest"))
				if after := listing(t, st); after != before {
					t.Fatalf("the failed %s changed the bucket:\n%s\nwas\n%s", c.args[0], after, before)
				}
			}
		})
	}
	// Undone, every byte reads back, and the open stage seals.
	tg.run(t, nil, read(sealed)...).must(t)
	tg.run(t, nil, inspect(sealed)...).must(t)
	tg.run(t, nil, seal...).must(t)
}

func firstLineWith(s, sub string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
