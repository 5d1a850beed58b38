package docstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/pierrec/lz4/v4"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TestFrameRangesRecipe follows docs/interop.md's "one frame straight from
// S3" recipe with nothing but the manifest's JSON and the index's
// documented 48-byte entries (as a Python client sees them: no
// durashuffle types) and arrow-go's IPC reader (no durashuffle decoding):
// GET the stage manifest, GET the partition's entries from the index by
// range, GET each frame's byte range of its object, decode it as an Arrow
// IPC stream, check its CRC32C.
func TestFrameRangesRecipe(t *testing.T) {
	ctx := context.Background()
	st, _ := testenv.Embedded(t).NewStore(t)
	cfg := durashuffle.DefaultConfig()
	cfg.Write.ChunkSize = 5 * durashuffle.MiB
	cfg.Write.FrameTargetBytes = 64 * durashuffle.KiB
	c := testenv.Client(t, cfg, durashuffle.WithStore(st))
	defer c.Close()

	const query, stage, partitions, workers = "interop", 3, 4, 2
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
	}, nil)
	want := make([]int64, partitions) // rows and
	sums := make([]int64, partitions) // sum of ids per partition
	for w := range workers {
		wr, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Stage: stage, Worker: fmt.Sprint(w), Partitions: partitions, Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		for batch := range 20 {
			for p := range partitions {
				b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
				for i := range 1000 {
					id := int64(w*1_000_000 + batch*10_000 + p*1000 + i)
					b.Field(0).(*array.Int64Builder).Append(id)
					b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row %d of partition %d, a string long enough to compress", id, p))
					want[p]++
					sums[p] += id
				}
				rec := b.NewRecordBatch()
				if err := wr.Write(p, rec); err != nil {
					t.Fatal(err)
				}
				rec.Release()
				b.Release()
			}
		}
		if _, err := wr.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Seal(ctx, query, stage, workers); err != nil {
		t.Fatal(err)
	}

	// The recipe, step by step, with the docs' field names.
	stagePrefix := fmt.Sprintf("%s/%s/stage-%d/", cfg.Store.Prefix, query, stage)
	var m struct {
		Schema  []byte `json:"schema"` // base64 in the JSON
		Workers []struct {
			Objects []struct {
				Key string `json:"key"`
			} `json:"objects"`
		} `json:"workers"`
		Index struct {
			Key           string `json:"key"`
			EntriesOffset int64  `json:"entries_offset"`
			Entries       int64  `json:"entries"`
			First         []byte `json:"first"` // base64 in the JSON
			EntryBlock    int64  `json:"entry_block"`
			EntryCRCs     []byte `json:"entry_crcs"` // base64 in the JSON
		} `json:"index"`
	}
	type entry struct {
		Partition, Worker, Object, CRC32C uint32
		Offset, Length, Rows, Bytes       int64
	}
	// entries GETs partition p's 48-byte index entries: struct "<IIIIqqqq".
	entries := func(p int) []entry {
		first := func(p int) int64 { return int64(binary.LittleEndian.Uint32(m.Index.First[4*p:])) }
		n := first(p+1) - first(p)
		if n == 0 {
			return nil
		}
		// docs/format.md, Checksums: GET the whole checksum blocks that
		// hold entries [a, b), block 0 from byte 0, and verify each.
		a, z, k := first(p), first(p+1), m.Index.EntryBlock
		start := func(i int64) int64 {
			if i == 0 {
				return 0
			}
			return m.Index.EntriesOffset + 48*k*i
		}
		end := func(i int64) int64 { return m.Index.EntriesOffset + 48*min(k*(i+1), m.Index.Entries) }
		b0, b1 := a/k, (z+k-1)/k
		blocks := get(t, st, stagePrefix+m.Index.Key, start(b0), end(b1-1)-start(b0))
		for i := b0; i < b1; i++ {
			blk := blocks[start(i)-start(b0) : end(i)-start(b0)]
			if got, want := crc32.Checksum(blk, castagnoli), binary.LittleEndian.Uint32(m.Index.EntryCRCs[4*i:]); got != want {
				t.Fatalf("index block %d: CRC32C %08x, entry_crcs says %08x", i, got, want)
			}
		}
		b := blocks[m.Index.EntriesOffset+48*a-start(b0) : m.Index.EntriesOffset+48*z-start(b0)]
		out := make([]entry, n)
		if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The stage manifest ends with its checksum member: 21 bytes,
	// `,"crc32c":"` 8 hex digits `"}`, over the bytes before it and "}".
	mb := get(t, st, stagePrefix+"manifest.json", 0, -1)
	body, tail := append(bytes.Clone(mb[:len(mb)-21]), '}'), mb[len(mb)-21:]
	if !bytes.HasPrefix(tail, []byte(`,"crc32c":"`)) || !bytes.HasSuffix(tail, []byte(`"}`)) {
		t.Fatalf("stage manifest ends with %q", tail)
	}
	if got, want := fmt.Sprintf("%08x", crc32.Checksum(body, castagnoli)), string(tail[11:19]); got != want {
		t.Fatalf("stage manifest CRC32C %s, its trailer says %s", got, want)
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	// The stage's schema is an Arrow IPC stream of its own (schema, end).
	if r, err := ipc.NewReader(bytes.NewReader(m.Schema)); err != nil {
		t.Errorf("manifest schema is not an Arrow IPC stream: %v", err)
	} else {
		if !r.Schema().Equal(schema) || r.Next() {
			t.Errorf("manifest schema %s, want %s and no batches", r.Schema(), schema)
		}
		r.Release()
	}
	for p := range partitions {
		var rows, sum int64
		frames := 0
		for _, f := range entries(p) {
			if int(f.Partition) != p || f.Rows == 0 {
				continue
			}
			frames++
			body := get(t, st, stagePrefix+m.Workers[f.Worker].Objects[f.Object].Key, f.Offset, f.Length)
			if got := store.CRC32C(body); got != f.CRC32C {
				t.Errorf("partition %d frame at %d: CRC32C %d, manifest says %d", p, f.Offset, got, f.CRC32C)
			}
			r, err := ipc.NewReader(bytes.NewReader(frameStream(t, m.Schema, body)))
			if err != nil {
				t.Fatalf("partition %d: the byte range [%d, +%d) behind the schema message is not an Arrow IPC stream: %v", p, f.Offset, f.Length, err)
			}
			if !r.Schema().Equal(schema) {
				t.Errorf("frame schema %s", r.Schema())
			}
			var n int64
			for r.Next() {
				rec := r.RecordBatch()
				n += rec.NumRows()
				for _, id := range rec.Column(0).(*array.Int64).Int64Values() {
					sum += id
				}
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			r.Release()
			if n != f.Rows {
				t.Errorf("partition %d frame at %d: %d rows, manifest says %d", p, f.Offset, n, f.Rows)
			}
			rows += n
		}
		if rows != want[p] || sum != sums[p] || frames < 2 {
			t.Errorf("partition %d: %d rows with id sum %d in %d frames; wrote %d rows with sum %d", p, rows, sum, frames, want[p], sums[p])
		}
	}
}

func get(t *testing.T, st interface {
	GetRange(context.Context, string, int64, int64) (io.ReadCloser, error)
}, key string, off, length int64) []byte {
	t.Helper()
	rc, err := st.GetRange(context.Background(), key, off, length)
	if err != nil {
		t.Fatalf("GET %s [%d, +%d): %v", key, off, length, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// frameStream is the recipe's decoding of one frame with nothing but an
// LZ4 block decoder: the 8-byte header (codec, three zero bytes, the
// decompressed length), the payload decompressed, the stage schema's IPC
// message before it (the manifest's schema stream without its 8-byte
// end-of-stream marker) and an end-of-stream marker after it.
func frameStream(t *testing.T, schemaStream, body []byte) []byte {
	t.Helper()
	if len(body) < 8 {
		t.Fatalf("a frame of %d bytes", len(body))
	}
	n := binary.LittleEndian.Uint32(body[4:8])
	payload := body[8:]
	switch body[0] {
	case 0: // stored as is
	case 1:
		payload = make([]byte, n)
		if got, err := lz4.UncompressBlock(body[8:], payload); err != nil || got != int(n) {
			t.Fatalf("lz4 block: %d of %d bytes: %v", got, n, err)
		}
	default:
		t.Fatalf("frame codec %d", body[0])
	}
	out := append([]byte{}, schemaStream[:len(schemaStream)-8]...)
	out = append(out, payload...)
	return append(out, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0)
}
