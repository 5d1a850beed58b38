package manifest

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func sample() *Worker {
	w := &Worker{
		FormatVersion: FormatVersion, Kind: KindWorker,
		Query: "q1", Stage: 2, Worker: "3", Attempt: "a1",
		Schema: []byte{1, 2, 3}, Compression: "lz4", Partitions: 4, ChunkSize: 8 << 20,
		Objects: []Object{{Key: DataName("3", "a1", "00000000000000ab", 0), Size: 300, Parts: 1, CRC32C: 99}},
		Frames: []Frame{
			{Partition: 0, Object: 0, Offset: 0, Length: 100, Rows: 10, Bytes: 400, CRC32C: 1},
			{Partition: 3, Object: 0, Offset: 100, Length: 200, Rows: 20, Bytes: 800, CRC32C: 2},
		},
		WriterVersion: "test", WrittenAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	w.Totals = w.Sum()
	return w
}

func TestWorkerRoundTrip(t *testing.T) {
	w := sample()
	b, err := w.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeWorker("m", b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Totals != (Totals{Rows: 30, BytesLogical: 1200, BytesStored: 300, Frames: 2, Objects: 1, Parts: 1}) {
		t.Fatalf("totals %+v", got.Totals)
	}
	if string(got.Schema) != "\x01\x02\x03" || got.Frames[1] != w.Frames[1] || !got.WrittenAt.Equal(w.WrittenAt) {
		t.Fatalf("round trip lost data: %+v", got)
	}
}

func TestDecodeRejects(t *testing.T) {
	mutate := func(f func(*Worker)) []byte {
		w := sample()
		f(w)
		b, err := w.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name string
		in   []byte
		is   error
		want string
	}{
		{"not a container", []byte("nope, not a manifest"), ErrCorrupt, `m starts with "nope", not the magic "DSM3"`},
		{"version 1 JSON", []byte(`{"format_version":"1.0","kind":"worker","frames":[]}`), ErrVersion, `format_version "1.0"; this reader understands 3.x`},
		{"future major", mutate(func(w *Worker) { w.FormatVersion = "4.0" }), ErrVersion, `format_version "4.0"; this reader understands 3.x`},
		{"no version", mutate(func(w *Worker) { w.FormatVersion = "" }), ErrCorrupt, `format_version ""`},
		{"minor ok", mutate(func(w *Worker) { w.FormatVersion = "3.7" }), nil, ""},
		{"past object end", mutate(func(w *Worker) { w.Frames[1].Length = 201 }), ErrCorrupt, "frame 1 [100, +201) lies outside object worker-3/attempt-a1/data-00000000000000ab-0.arrows of 300 bytes"},
		{"totals disagree", mutate(func(w *Worker) { w.Totals.Rows++ }), ErrCorrupt, "totals say"},
		{"missing object", mutate(func(w *Worker) { w.Frames[0].Object = 1 }), ErrCorrupt, "frame 0 names object 1 of 1"},
		// A reader allocates a frame's bytes before they arrive: a frame
		// longer than the format allows, inside an object that claims to
		// hold it, is refused before any read.
		{"frame past the format's length", mutate(func(w *Worker) {
			w.Objects[0].Size, w.Frames[1].Length = 1<<42, 1<<42-100
			w.Totals = w.Sum()
		}), ErrCorrupt, "frame 1 is 4398046511004 bytes long, more than a frame can be (4328521728)"},
		{"bad id", mutate(func(w *Worker) { w.Worker = "../x" }), ErrCorrupt, "worker ID"},
		{"bad compression", mutate(func(w *Worker) { w.Compression = "brotli" }), ErrCorrupt, `unknown compression "brotli"`},
		{"escaping key", mutate(func(w *Worker) { w.Objects[0].Key = "../../other" }), ErrCorrupt, "object 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeWorker("m", c.in)
			if c.is == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %v containing %q", err, c.is, c.want)
			}
		})
	}
}

func TestMergeOrdersWorkersNumerically(t *testing.T) {
	var ws []*Worker
	for _, id := range []string{"10", "2", "b", "0", "a"} {
		w := sample()
		w.Worker = id
		ws = append(ws, w)
	}
	s, err := merge("q1", 2, ws)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range s.Workers {
		got = append(got, w.Worker)
	}
	if strings.Join(got, ",") != "0,2,10,a,b" {
		t.Fatalf("order %v", got)
	}
	if s.Totals.Rows != 150 {
		t.Fatalf("rows %d", s.Totals.Rows)
	}
	odd := sample()
	odd.Partitions = 5
	if _, err := merge("q1", 2, []*Worker{sample(), odd}); err == nil || !strings.Contains(err.Error(), "has 5 partitions") {
		t.Fatalf("partition mismatch: %v", err)
	}
}

func TestLayout(t *testing.T) {
	l := Layout{Prefix: "/shuffle/"}
	cases := map[string]string{
		l.StageManifestKey("q", 1):                                     "shuffle/q/stage-1/manifest.json",
		l.WorkerManifestKey("q", 1, "w"):                               "shuffle/q/stage-1/worker-w/manifest.json",
		l.ObjectKey("q", 1, DataName("w", "a", "00000000000000ab", 2)): "shuffle/q/stage-1/worker-w/attempt-a/data-00000000000000ab-2.arrows",
		Layout{}.StagePrefix("q", 0):                                   "q/stage-0/",
		l.GuardProbeKey("0123456789abcdef"):                            "shuffle/~commit-guard/0123456789abcdef",
		l.ReadyProbePrefix():                                           "shuffle/~readyz/",
		l.SpreadPrefix():                                               "shuffle/~",
		Layout{}.ReadyProbePrefix():                                    "~readyz/",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
	// Parse reads back what the key functions make.
	for key, want := range map[string]Key{
		l.StageManifestKey("q", 1):                                     {Kind: KeyStageManifest, Query: "q", Stage: 1},
		l.WorkerManifestKey("q", 1, "7"):                               {Kind: KeyWorkerManifest, Query: "q", Stage: 1, Worker: "7"},
		l.ObjectKey("q", 1, DataName("w", "a", "00000000000000ab", 2)): {Kind: KeyData, Query: "q", Stage: 1, Worker: "w", Attempt: "a"},
		l.ObjectKey("q", 1, IndexName("s1")):                           {Kind: KeyIndex, Query: "q", Stage: 1},
		l.GuardProbeKey("0123456789abcdef"):                            {Kind: KeyGuardProbe},
		l.ReadyProbePrefix() + "x":                                     {Kind: KeyReadyProbe},
	} {
		if k, ok := l.Parse(key); !ok || k != want {
			t.Errorf("Parse(%q) = %+v, %v, want %+v", key, k, ok, want)
		}
	}
}

// TestLayoutShardQueryPrefix: of the folders a List of SpreadPrefix
// returns, only shard folders hold a query's spread data objects; the
// probes' folders and anything else are not shards.
func TestLayoutShardQueryPrefix(t *testing.T) {
	l := Layout{Prefix: "shuffle", Spread: 16}
	data := l.ObjectKey("q", 1, l.DataKey("q", 1, "w", "a", "00000000000000ab", 0))
	shard := data[:strings.Index(data, "/q/")+1] // shuffle/~{hex}/
	if got, ok := l.ShardQueryPrefix(shard, "q"); !ok || !strings.HasPrefix(data, got) || got != shard+"q/" {
		t.Errorf("ShardQueryPrefix(%q, q) = %q, %v; want %q, the prefix of %s", shard, got, ok, shard+"q/", data)
	}
	for _, dir := range []string{
		"shuffle/~commit-guard/", "shuffle/~readyz/", "shuffle/~/", "shuffle/~0a/b/", "other/~0a/", "shuffle/~0A/",
	} {
		if got, ok := l.ShardQueryPrefix(dir, "q"); ok {
			t.Errorf("ShardQueryPrefix(%q, q) = %q, true; it is not a shard folder", dir, got)
		}
	}
}

func TestValidateID(t *testing.T) {
	good := []string{"a", "Q-1.2_x", strings.Repeat("x", 128)}
	bad := map[string]string{"": "empty", ".": "not allowed", "..": "not allowed", "a/b": "only A-Z", "a b": "only A-Z", strings.Repeat("x", 129): "at most 128"}
	for _, id := range good {
		if err := ValidateID("query", id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for id, want := range bad {
		if err := ValidateID("query", id); !errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", id, err, want)
		}
	}
}
