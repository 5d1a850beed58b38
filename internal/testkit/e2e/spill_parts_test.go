package e2e_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// checkRows fails t unless the stage's partitions hold rows [0, n) of
// batch, each once, with its own blob.
func checkRows(t *testing.T, c *durashuffle.Client, query string, partitions, n int) {
	t.Helper()
	seen := make([]bool, n)
	want := make([]byte, 1024)
	for p, recs := range readStage(t, c, query, partitions) {
		for _, rec := range recs {
			ids := rec.Column(0).(*array.Int64)
			blobs := rec.Column(1).(*array.Binary)
			for i := range ids.Len() {
				id := int(ids.Value(i))
				if id < 0 || id >= n || seen[id] {
					t.Fatalf("partition %d: row %d read twice or never written (%d rows written)", p, id, n)
				}
				seen[id] = true
				r := rand.New(rand.NewPCG(uint64(id), 7))
				for j := range want {
					want[j] = byte(r.Uint32())
				}
				if !bytes.Equal(blobs.Value(i), want) {
					t.Fatalf("partition %d: row %d's blob differs from the one written", p, id)
				}
			}
		}
	}
	for id, ok := range seen {
		if !ok {
			t.Fatalf("row %d of %d not read back", id, n)
		}
	}
}

// TestSpillPartsSizedByObject: a writer whose runs spilled stores its
// object in about upload_concurrency parts (the object's size split
// evenly, behind a first part of S3's least, 5 MiB), not one part per
// chunk_size, each read from disk (its frames, 256 KiB and more, taken
// in place from the runs' file in spill_dir): the pool takes no chunk
// buffer for it, the UploadParts are the parts stored, every row reads
// back with its bytes, and spill_dir is empty after Commit.
func TestSpillPartsSizedByObject(t *testing.T) {
	const (
		partitions = 8
		rows       = 40 << 10 // about 40 MiB of 1 KiB random blobs
	)
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		cfg := testConfig()
		spillRoot := t.TempDir()
		cfg.Write.SpillDir = spillRoot
		c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "parts", Worker: "0", Partitions: partitions})
		if err != nil {
			t.Fatal(err)
		}
		if err := writeRows(w, rows, partitions); err != nil {
			t.Fatal(err)
		}
		before := counter.Requests()
		m, err := w.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		after := counter.Requests()
		if len(m.Objects) != 1 {
			t.Fatalf("%d objects, want 1", len(m.Objects))
		}
		obj := m.Objects[0]
		chunks := (obj.Size + int64(cfg.Write.ChunkSize) - 1) / int64(cfg.Write.ChunkSize)
		uploads := after["UploadPart"] - before["UploadPart"]
		t.Logf("object of %d bytes (%d chunks of chunk_size): %d parts, %d UploadPart, %d CreateMultipartUpload, %d PutObject at Commit",
			obj.Size, chunks, obj.Parts, uploads, after["CreateMultipartUpload"]-before["CreateMultipartUpload"], after["PutObject"]-before["PutObject"])
		if want := cfg.Write.UploadConcurrency + 1; obj.Parts != want || uploads != int64(obj.Parts) {
			t.Fatalf("object of %d bytes stored in %d parts with %d UploadPart requests, want %d (upload_concurrency and the first), one request each",
				obj.Size, obj.Parts, uploads, want)
		}
		if chunks <= int64(obj.Parts) {
			t.Fatalf("object of %d bytes is %d chunks: the test needs more chunks than parts", obj.Size, chunks)
		}
		if peak := c.Stats().PeakBuffered; peak != 0 {
			t.Fatalf("the upload pool held %d chunk buffers, want none: the parts stream from disk", peak)
		}
		if files := spillFiles(t, spillRoot); len(files) != 0 {
			t.Fatalf("spill_dir holds %v after Commit, want nothing", files)
		}
		checkRows(t, c, "parts", partitions, rows)
	})
}
