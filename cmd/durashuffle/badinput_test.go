package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// connCounter is a loopback TCP listener that counts the connections made
// to it and closes them at once: a command pointed at it that opens none
// made no request at all (not even one refused before its first byte).
func connCounter(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return "http://" + ln.Addr().String(), &n
}

// TestBadIDsMakeNoRequest: IDs that are empty, too long, "..", or contain
// "/" are refused with exit code 2, a message naming the ID and the rule,
// and not one connection to the endpoint, by every command that takes
// them.
func TestBadIDsMakeNoRequest(t *testing.T) {
	t.Parallel()
	url, conns := connCounter(t)
	target := []string{"--endpoint", url, "--path-style", "--bucket", "bucket", "--retry-max-attempts", "1"}
	env := []string{"AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y"}
	long := strings.Repeat("q", 129)
	type idCase struct{ value, want string }
	bad := map[string]idCase{
		"empty":    {"", "is empty"},
		"too long": {long, "is 129 characters, at most 128 allowed"},
		"dotdot":   {"..", `".." is not allowed`},
		"slash":    {"a/b", `"a/b": only A-Z a-z 0-9 . _ - are allowed`},
	}
	// Commands, the flag carrying the ID, and the kind the message names.
	for _, c := range []struct {
		kind     string
		args     func(id string) []string
		required string // the flag an empty value leaves missing, if any
	}{
		{"query", func(id string) []string { return []string{"read", "--query=" + id, "--format", "jsonl"} }, "--query"},
		{"query", func(id string) []string { return []string{"inspect", "--query=" + id} }, "--query"},
		{"query", func(id string) []string { return []string{"seal", "--query=" + id, "--workers", "2"} }, "--query"},
		{"query", func(id string) []string { return []string{"ls", "--query=" + id} }, ""},
		{"query", func(id string) []string { return []string{"delete-query", "--query=" + id} }, ""},
		{"query", func(id string) []string { return []string{"write", "--query=" + id, "-w", "0", "--partitions", "1"} }, "--query"},
		{"worker", func(id string) []string { return []string{"write", "-q", "q", "--worker=" + id, "--partitions", "1"} }, "--worker"},
		{"attempt", func(id string) []string {
			return []string{"write", "-q", "q", "-w", "0", "--attempt=" + id, "--partitions", "1"}
		}, "-"},
	} {
		for _, name := range []string{"empty", "too long", "dotdot", "slash"} {
			id := bad[name]
			if id.value == "" && c.required == "-" {
				continue // an empty --attempt asks for a fresh one
			}
			args := c.args(id.value)
			t.Run(args[0]+" "+c.kind+" "+name, func(t *testing.T) {
				r := cli(t, env, []byte{}, append(args, target...)...)
				want := []string{c.kind + " ID", id.want}
				if id.value == "" && c.required != "" {
					want = []string{c.required + " is required"}
				}
				if r.code != 2 {
					t.Fatalf("exit %d, want 2:\n%s", r.code, r.stderr)
				}
				for _, w := range want {
					if !strings.Contains(r.stderr, w) {
						t.Fatalf("stderr lacks %q:\n%s", w, r.stderr)
					}
				}
			})
		}
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("%d connections reached the endpoint", n)
	}
	// The listener does count: a valid command connects.
	if r := cli(t, env, nil, append([]string{"ls", "--query", "q"}, target...)...); r.code != 1 || conns.Load() == 0 {
		t.Fatalf("a valid ls against the listener: exit %d, %d connections\n%s", r.code, conns.Load(), r.stderr)
	}
}

// TestConfigOutOfRange: a configuration value out of range, from a flag,
// the environment or a file, exits 2 naming the key and the allowed range,
// before any connection.
func TestConfigOutOfRange(t *testing.T) {
	t.Parallel()
	url, conns := connCounter(t)
	target := []string{"--endpoint", url, "--path-style", "--bucket", "bucket"}
	creds := []string{"AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y"}
	file := filepath.Join(t.TempDir(), "durashuffle.yaml")
	if err := os.WriteFile(file, []byte("retry_max_attempts: 0\nread_ahead: 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"chunk size", nil, []string{"write", "-q", "q", "-w", "0", "--partitions", "1", "--chunk-size", "4MiB"}, "chunk_size must be between 5MiB and 5GiB, got 4MiB"},
		{"upload concurrency", nil, []string{"write", "-q", "q", "-w", "0", "--partitions", "1", "--upload-concurrency", "0"}, "upload_concurrency must be between 1 and 1024, got 0"},
		{"max buffered chunks env, a key read does not use", []string{"DURASHUFFLE_MAX_BUFFERED_CHUNKS=-1"}, []string{"read", "-q", "q"}, "max_buffered_chunks must be between 1 and 65536, got -1"},
		{"read ahead env", []string{"DURASHUFFLE_READ_AHEAD=1000"}, []string{"read", "-q", "q"}, "read_ahead must be between 1 and 256, got 1000"},
		{"retry attempts file", nil, []string{"delete-query", "-q", "q", "--config", file}, "retry_max_attempts must be between 1 and 100, got 0"},
		{"results retention", nil, []string{"gc", "--older-than", "1h", "--results-retention", "-1h"}, "results_retention must be 0 or positive, got -1h0m0s"},
		{"sse", nil, []string{"seal", "-q", "q", "--workers", "1", "--sse", "DES"}, `sse must be empty, AES256 or aws:kms, got "DES"`},
		{"sse key without kms env", []string{"DURASHUFFLE_SSE_KMS_KEY_ID=k1"}, []string{"ls"}, "sse_kms_key_id must be set only with sse aws:kms"},
		{"compression", []string{"DURASHUFFLE_COMPRESSION=gzip"}, []string{"ls"}, `compression must be one of lz4, zstd, none, auto, got "gzip"`},
		{"frame target env", []string{"DURASHUFFLE_FRAME_TARGET_BYTES=1KiB"}, []string{"inspect", "-q", "q"}, "frame_target_bytes must be between 4KiB and 1GiB, got 1KiB"},
		{"prefix", nil, []string{"gc", "--older-than", "1h", "--prefix", "../other"}, `prefix must be a relative key prefix without '..', got "../other"`},
		{"no bucket", nil, []string{"gc", "--older-than", "1h"}, "bucket is not set"},
		{"negative older-than", nil, []string{"gc", "--older-than", "-1h"}, "--older-than must not be negative"},
		{"missing older-than", nil, []string{"gc"}, "--older-than is required"},
		{"bad older-than", nil, []string{"gc", "--older-than", "a while"}, `invalid argument "a while" for "--older-than"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, target...)
			if tc.name == "no bucket" {
				args = append(tc.args, target[:3]...) // --endpoint URL --path-style
			}
			r := cli(t, append(creds, tc.env...), []byte{}, args...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, want 2 saying %q:\n%s", r.code, tc.want, r.stderr)
			}
		})
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("%d connections reached the endpoint", n)
	}
}

// listing is every key and size in the bucket: what a failed command must
// leave as it was.
func listing(t *testing.T, st store.Store) string {
	t.Helper()
	objs, _, err := st.List(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, o := range objs {
		fmt.Fprintf(&b, "%s %d\n", o.Key, o.Size)
	}
	return b.String()
}

// TestDamagedStoredData damages what a committed stage is made of, one
// thing at a time, directly in the store: each read or inspect exits 1
// with a message naming the object, the offset, the partition or the
// manifest, and what is wrong; the failed command changes nothing, and
// once the damage is undone the stage reads back whole.
func TestDamagedStoredData(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backends[1])
	st, _ := tg.ep.NewStore(t)
	ctx := context.Background()
	const q = "damaged"
	l := manifest.Layout{Prefix: "durashuffle"}
	in := arrowStream(t, testBatches(t, 0, 4000, 500))
	for w := range 2 {
		tg.run(t, in, "write", "-q", q, "-w", strconv.Itoa(w), "--partitions", "4", "--partition-by", "id").must(t)
	}
	tg.run(t, nil, "seal", "-q", q, "--workers", "2").must(t)
	good := tg.run(t, nil, "read", "-q", q, "--format", "jsonl").must(t).stdout
	if n := len(jsonLinesOf(t, good)); n != 8000 {
		t.Fatalf("read %d rows, want 8000", n)
	}
	m, err := manifest.LoadStageManifest(ctx, st, l, q, 0)
	if err != nil {
		t.Fatal(err)
	}
	w1 := m.Workers[1]
	dataKey := l.ObjectKey(q, 0, w1.Objects[0].Key)
	all, err := m.Frames(ctx, st, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	last := -1 // index entry of the object's last frame
	for i, f := range all {
		if f.Worker == 1 && f.Object == 0 && (last < 0 || f.Offset > all[last].Offset) {
			last = i
		}
	}
	fr := all[last]
	stageKey := l.StageManifestKey(q, 0)
	indexKey := l.ObjectKey(q, 0, m.Index.Key)
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
	put := func(key string, b []byte) {
		t.Helper()
		if err := st.Put(ctx, key, b, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	orig := map[string][]byte{dataKey: get(dataKey), stageKey: get(stageKey), indexKey: get(indexKey)}
	longer := bytes.Clone(orig[indexKey]) // the frame's length + 1
	lenAt := m.Index.EntriesOffset + manifest.EntrySize*int64(last) + 24
	binary.LittleEndian.PutUint64(longer[lenAt:], uint64(fr.Length+1))
	flipped := bytes.Clone(orig[dataKey])
	flipped[fr.Offset+fr.Length/2] ^= 0x01
	// edit returns the stage manifest with f applied.
	edit := func(f func(*manifest.Stage)) []byte {
		t.Helper()
		s, err := manifest.DecodeStage("stage", orig[stageKey])
		if err != nil {
			t.Fatal(err)
		}
		f(s)
		b, err := s.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		key  string
		body []byte
		args []string
		want []string
	}{
		{"flipped byte", dataKey, flipped,
			[]string{"read", "-q", q, "--partition", strconv.Itoa(fr.Partition), "--format", "jsonl"},
			[]string{"frame checksum mismatch", fmt.Sprintf("frame of partition %d at offset %d (%d bytes) of %s (worker 1)", fr.Partition, fr.Offset, fr.Length, dataKey)}},
		{"truncated object", dataKey, orig[dataKey][:fr.Offset+fr.Length/2],
			[]string{"read", "-q", q, "--format", "csv"},
			[]string{"data object truncated", dataKey, fmt.Sprintf("expected %d bytes at offset %d, got %d", fr.Length, fr.Offset, fr.Length/2)}},
		{"stage manifest not JSON", stageKey, []byte("<html>502 Bad Gateway</html>"),
			[]string{"read", "-q", q, "--format", "jsonl"},
			[]string{"corrupt manifest: " + stageKey + " is not JSON"}},
		{"inspect of a manifest not JSON", stageKey, orig[stageKey][:len(orig[stageKey])/2],
			[]string{"inspect", "-q", q},
			[]string{"corrupt manifest: " + stageKey + " is not JSON"}},
		{"unknown major version", stageKey, edit(func(s *manifest.Stage) { s.FormatVersion = "4.0" }),
			[]string{"read", "-q", q, "--format", "jsonl"},
			[]string{"unsupported manifest format version", `format_version "4.0"; this reader understands 3.x`}},
		{"frame past the object's end", indexKey, longer,
			[]string{"read", "-q", q, "--partition", strconv.Itoa(fr.Partition), "--format", "jsonl"},
			// The index's checksum catches the lie before the entry is
			// used: the index is named, not the data object.
			[]string{"corrupt manifest", "index " + indexKey + ": entries [", "has CRC32C"}},
		{"2^40 partitions", stageKey, edit(func(s *manifest.Stage) { s.Partitions = 1 << 40 }),
			[]string{"inspect", "-q", q},
			[]string{"corrupt manifest", "has 1099511627776 partitions, want 1 to 1048576"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			put(tc.key, tc.body)
			defer put(tc.key, orig[tc.key])
			before := listing(t, st)
			r := tg.run(t, nil, tc.args...)
			if r.code != 1 {
				t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Fatalf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if after := listing(t, st); after != before {
				t.Fatalf("the failed %s changed the bucket:\n%s\nwas\n%s", tc.args[0], after, before)
			}
		})
	}
	// The flipped byte only hurts its own frame: the other partitions of
	// the same object still read.
	put(dataKey, flipped)
	for p := range 4 {
		if p == fr.Partition {
			continue
		}
		tg.run(t, nil, "read", "-q", q, "--partition", strconv.Itoa(p), "--format", "jsonl").must(t)
	}
	put(dataKey, orig[dataKey])
	// Nothing lost: with the damage undone the stage reads as before.
	if again := tg.run(t, nil, "read", "-q", q, "--format", "jsonl").must(t).stdout; again != good {
		t.Fatal("the stage reads differently after the damaged reads")
	}
}
