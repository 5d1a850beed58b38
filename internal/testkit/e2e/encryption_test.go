package e2e_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// rootKey returns a random root key.
func rootKey() []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = byte(rand.Uint32())
	}
	return k
}

// encConfig is testConfig with small runs, so that a few MiB of rows
// spill several runs with spill on.
func encConfig(t *testing.T, spill string) durashuffle.Config {
	cfg := testConfig()
	cfg.Write.Spill = spill
	cfg.Write.CoalesceBudget = 1 * durashuffle.MiB
	cfg.Write.FrameTargetBytes = 64 * durashuffle.KiB
	cfg.Write.SpillDir = t.TempDir()
	return cfg
}

// plainWindows returns every 16-byte window at a multiple of 16 of the
// blob values of rows [0, n): a stored copy of 31 or more bytes of any
// value holds one of them.
func plainWindows(n int) map[[16]byte]int {
	w := make(map[[16]byte]int)
	rec := batch(0, n)
	defer rec.Release()
	blobs := rec.Column(1).(*array.Binary)
	for i := range blobs.Len() {
		v := blobs.Value(i)
		for off := 0; off+16 <= len(v); off += 16 {
			w[[16]byte(v[off:])] = i
		}
	}
	return w
}

// plaintextIn returns how many 16-byte windows of b are windows of
// plain.
func plaintextIn(b []byte, plain map[[16]byte]int) int {
	n := 0
	for i := 0; i+16 <= len(b); i++ {
		if _, ok := plain[[16]byte(b[i:])]; ok {
			n++
		}
	}
	return n
}

// storedPlaintext counts the windows of plain in every object under the
// client's prefix.
func storedPlaintext(t *testing.T, c *durashuffle.Client, plain map[[16]byte]int) (hits, objects int) {
	t.Helper()
	ctx := context.Background()
	objs, _, err := c.Store().List(ctx, c.Layout().Root(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		hits += plaintextIn(getObject(t, c.Store(), o.Key), plain)
	}
	return hits, len(objs)
}

func getObject(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	r, err := st.GetRange(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// spilledPlaintext counts the windows of plain in every file under dir.
func spilledPlaintext(t *testing.T, dir string, plain map[[16]byte]int) (hits int, bytes int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		bytes += int64(len(b))
		hits += plaintextIn(b, plain)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits, bytes
}

// checkEncRows fails unless parts holds exactly the rows writeRows(n,
// partitions) wrote, each in its partition.
func checkEncRows(t *testing.T, parts [][]arrow.RecordBatch, n int) {
	t.Helper()
	seen := make([]bool, n)
	for p, recs := range parts {
		for _, rec := range recs {
			ids := rec.Column(0).(*array.Int64)
			for i := range ids.Len() {
				id := int(ids.Value(i))
				if id < 0 || id >= n || seen[id] || (id/256)%len(parts) != p {
					t.Fatalf("row %d read from partition %d: out of range, repeated or in the wrong partition", id, p)
				}
				seen[id] = true
			}
		}
	}
	for id, ok := range seen {
		if !ok {
			t.Fatalf("row %d of %d not read back", id, n)
		}
	}
}

// writeWorkers writes rows [0, n) as workers workers (each its share of
// the batches) of stage of query and commits them.
func writeWorkers(t *testing.T, c *durashuffle.Client, query string, stage, workers, n, partitions int, during func()) {
	t.Helper()
	ctx := context.Background()
	for wk := range workers {
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Stage: stage, Worker: string(rune('0' + wk)), Attempt: "a", Partitions: partitions})
		if err != nil {
			t.Fatal(err)
		}
		for lo := wk * 256; lo < n; lo += 256 * workers {
			rec := batch(lo, min(256, n-lo))
			err := w.Write((lo/256)%partitions, rec)
			rec.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		if during != nil && wk == 0 {
			during()
		}
		if _, err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// writeOne commits the writer o names with rows [0, 100) in partition 0.
func writeOne(t *testing.T, c *durashuffle.Client, o durashuffle.WriterOptions) {
	t.Helper()
	ctx := context.Background()
	w, err := c.NewWriter(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	rec := batch(0, 100)
	err = w.Write(0, rec)
	rec.Release()
	if err == nil {
		_, err = w.Commit(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestEncryptedStageReadsBack: a stage written under a key, spill on
// and off, reads back exactly, sealed and combined, and neither its
// stored objects nor a spilling writer's spill file hold 16 bytes of
// any row's value; written without the key, the same rows are found in
// both, so the search finds what is there.
func TestEncryptedStageReadsBack(t *testing.T) {
	const n, partitions = 4000, 6
	plain := plainWindows(n)
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Start(t)
			for _, spill := range []string{"on", "off"} {
				for _, encrypt := range []bool{true, false} {
					name := "spill-" + spill + map[bool]string{true: "-encrypted", false: "-plain"}[encrypt]
					t.Run(name, func(t *testing.T) {
						ctx := context.Background()
						st, counter := e.NewStore(t)
						cfg := encConfig(t, spill)
						cfg.Store.Prefix = name
						opts := []durashuffle.Option{durashuffle.WithStore(st), durashuffle.WithCounter(counter)}
						if encrypt {
							opts = append(opts, durashuffle.WithEncryptionKey(rootKey()))
						}
						c := testenv.Client(t, cfg, opts...)
						defer c.Close()
						var spillHits int
						var spillBytes int64
						writeWorkers(t, c, "q", 0, 2, n, partitions, func() {
							spillHits, spillBytes = spilledPlaintext(t, cfg.Write.SpillDir, plain)
						})
						if _, err := c.Seal(ctx, "q", 0, 2); err != nil {
							t.Fatal(err)
						}
						checkEncRows(t, readStage(t, c, "q", partitions), n)
						hits, objs := storedPlaintext(t, c, plain)
						t.Logf("%d objects: %d plaintext windows; spill file %d bytes: %d plaintext windows", objs, hits, spillBytes, spillHits)
						if spill == "on" && spillBytes == 0 {
							t.Fatalf("the writer spilled nothing: the spill file is not checked")
						}
						if encrypt && (hits > 0 || spillHits > 0) {
							t.Fatalf("encrypted: %d windows of plaintext in the stored objects, %d in the spill file", hits, spillHits)
						}
						if !encrypt && (hits == 0 || (spill == "on" && spillHits == 0)) {
							t.Fatalf("plain: %d windows of plaintext in the objects, %d in the spill file: the search does not find stored rows", hits, spillHits)
						}
						if !encrypt {
							return
						}
						m, err := manifest.LoadStageManifest(ctx, c.Store(), c.Layout(), "q", 0)
						if err != nil {
							t.Fatal(err)
						}
						if e := m.Encrypted(); e == nil || e.Cipher != "aes-256-gcm" || len(e.Fingerprint) != 32 {
							t.Fatalf("stage manifest records encryption %+v", e)
						}
						// Combined: the sealed frames are copied as they are
						// into fewer objects, and read back with the key.
						cs, err := c.Combine(ctx, "q", 0, combine.Options{Buckets: 2})
						if err != nil {
							t.Fatal(err)
						}
						if _, err := cs.RunAll(ctx, 2); err != nil {
							t.Fatal(err)
						}
						if _, err := cs.Seal(ctx); err != nil {
							t.Fatal(err)
						}
						m, err = manifest.LoadStageManifest(ctx, c.Store(), c.Layout(), "q", 0)
						if err != nil || m.Combines == nil || m.Encrypted() == nil {
							t.Fatalf("after combine: %v, combined %v, encryption %v", err, m != nil && m.Combines != nil, m != nil && m.Encrypted() != nil)
						}
						checkEncRows(t, readStage(t, c, "q", partitions), n)
					})
				}
			}
		})
	}
}

// frameAt is the place of a partition's first frame in a worker's object.
type frameAt struct {
	w   *manifest.Worker
	i   int // index in w.Frames
	key string
}

// firstFrame returns worker's first frame of partition in stage of query.
func firstFrame(t *testing.T, c *durashuffle.Client, query string, stage int, worker string, partition int) (frameAt, []byte) {
	t.Helper()
	w, err := manifest.LoadWorker(context.Background(), c.Store(), c.Layout(), query, stage, worker)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range w.Frames {
		if f.Partition == partition {
			key := c.Layout().ObjectKey(query, stage, w.Objects[f.Object].Key)
			obj := getObject(t, c.Store(), key)
			return frameAt{w: w, i: i, key: key}, append([]byte(nil), obj[f.Offset:f.Offset+f.Length]...)
		}
	}
	t.Fatalf("worker %s of %s stage %d has no frame of partition %d", worker, query, stage, partition)
	return frameAt{}, nil
}

// replaceFrame stores fr's object with its frame replaced by b, and the
// worker manifest with every checksum, offset and size made to match:
// what an attacker with write access to the bucket can do without the
// key.
func replaceFrame(t *testing.T, c *durashuffle.Client, fr frameAt, b []byte) {

	ctx := context.Background()
	f := fr.w.Frames[fr.i]
	obj := getObject(t, c.Store(), fr.key)
	out := append(append(append([]byte(nil), obj[:f.Offset]...), b...), obj[f.Offset+f.Length:]...)
	delta := int64(len(b)) - f.Length
	for j := range fr.w.Frames {
		g := &fr.w.Frames[j]
		if g.Object == f.Object && g.Offset > f.Offset {
			g.Offset += delta
		}
	}
	fr.w.Frames[fr.i].Length, fr.w.Frames[fr.i].CRC32C = int64(len(b)), store.CRC32C(b)
	o := &fr.w.Objects[f.Object]
	o.Size, o.CRC32C = int64(len(out)), store.CRC32C(out)
	fr.w.Totals.BytesStored += delta
	if err := c.Store().Put(ctx, fr.key, out, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	enc, err := fr.w.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Store().Put(ctx, c.Layout().WorkerManifestKey(fr.w.Query, fr.w.Stage, fr.w.Worker), enc, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// transplant makes worker dst of stage 0 of query hold, under keys with
// their own write ID, the objects and frames of worker src of stage
// (and its manifest the matching checksums): every frame then carries
// its object's write ID, and only the place sealed into it tells it
// does not belong. It returns the place of dst's first frame.
func transplant(t *testing.T, c *durashuffle.Client, query string, stage int, src, dst string) frameAt {
	t.Helper()
	ctx := context.Background()
	l := c.Layout()
	from, err := manifest.LoadWorker(ctx, c.Store(), l, query, stage, src)
	if err != nil {
		t.Fatal(err)
	}
	to, err := manifest.LoadWorker(ctx, c.Store(), l, query, 0, dst)
	if err != nil {
		t.Fatal(err)
	}
	to.Objects, to.Frames, to.Totals, to.Codecs = nil, from.Frames, from.Totals, from.Codecs
	for n, o := range from.Objects {
		b := getObject(t, c.Store(), l.ObjectKey(query, stage, o.Key))
		o.Key = l.DataKey(query, 0, to.Worker, to.Attempt, manifest.WriteID(o.Key), n)
		if err := c.Store().Put(ctx, l.ObjectKey(query, 0, o.Key), b, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		to.Objects = append(to.Objects, o)
	}
	enc, err := to.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Store().Put(ctx, l.WorkerManifestKey(query, 0, dst), enc, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return frameAt{w: to, i: 0, key: l.ObjectKey(query, 0, to.Objects[to.Frames[0].Object].Key)}
}

// readErr reads every partition of stage 0 of query and returns the
// first error.
func readErr(c *durashuffle.Client, query string) error {
	ctx := context.Background()
	s, err := c.OpenStage(ctx, query, 0)
	if err != nil {
		return err
	}
	rr, err := s.ReadPartitions(ctx, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
	}
	return rr.Err()
}

// TestEncryptedFramesRefuseTampering: an attacker who can write the
// bucket but holds no key rewrites a frame and every checksum around it
// (object CRC32C, frame CRC32C, worker manifest): a flipped ciphertext
// byte, a frame of another worker of the stage, of another partition, a
// cut tag; or makes a worker's objects those of another worker, or of
// the same worker in another stage, under keys that name their writer.
// Each read fails naming the object, the partition and the offset, as
// corrupt; a byte changed with the checksums left stale fails as a
// checksum mismatch. A wrong key, no key, or a key for a plain stage
// fail naming the stage; workers written under two keys, or a key and
// none, fail the seal, which commits nothing.
func TestEncryptedFramesRefuseTampering(t *testing.T) {
	const n, partitions = 3000, 3
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Start(t)
			key := rootKey()
			for _, tc := range []struct {
				name   string
				tamper func(t *testing.T, c *durashuffle.Client, query string) frameAt
				want   error // ErrCorrupt unless set
			}{
				{"flipped-byte", func(t *testing.T, c *durashuffle.Client, q string) frameAt {
					fr, b := firstFrame(t, c, q, 0, "0", 1)
					b[len(b)/2] ^= 0x10
					replaceFrame(t, c, fr, b)
					return fr
				}, nil},
				// A byte changed in the store, its checksums left as they
				// were: named a checksum mismatch, as in a plain stage.
				{"flipped-byte-stale-crc", func(t *testing.T, c *durashuffle.Client, q string) frameAt {
					fr, _ := firstFrame(t, c, q, 0, "0", 1)
					f := fr.w.Frames[fr.i]
					obj := getObject(t, c.Store(), fr.key)
					obj[f.Offset+f.Length/2] ^= 0x10
					if err := c.Store().Put(context.Background(), fr.key, obj, store.PutOptions{}); err != nil {
						t.Fatal(err)
					}
					return fr
				}, reader.ErrChecksum},
				{"other-worker", func(t *testing.T, c *durashuffle.Client, q string) frameAt {
					fr, _ := firstFrame(t, c, q, 0, "0", 1)
					_, other := firstFrame(t, c, q, 0, "1", 1)
					replaceFrame(t, c, fr, other)
					return fr
				}, nil},
				{"other-stage", func(t *testing.T, c *durashuffle.Client, q string) frameAt {
					return transplant(t, c, q, 1, "0", "0")
				}, nil},
				{"other-worker-renamed", func(t *testing.T, c *durashuffle.Client, q string) frameAt {
					return transplant(t, c, q, 0, "1", "0")
				}, nil},
				{"other-partition", func(t *testing.T, c *durashuffle.Client, q string) frameAt {
					fr, _ := firstFrame(t, c, q, 0, "0", 1)
					_, other := firstFrame(t, c, q, 0, "0", 2)
					replaceFrame(t, c, fr, other)
					return fr
				}, nil},
				{"cut-tag", func(t *testing.T, c *durashuffle.Client, q string) frameAt {
					fr, b := firstFrame(t, c, q, 0, "0", 1)
					// The tag's last byte cut, the nonce after it kept.
					tail := len(b) - frame.NonceSize
					replaceFrame(t, c, fr, append(b[:tail-1:tail-1], b[tail:]...))
					return fr
				}, nil},
			} {
				t.Run(tc.name, func(t *testing.T) {
					st, counter := e.NewStore(t)
					cfg := encConfig(t, "on")
					cfg.Store.Prefix = tc.name
					c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter), durashuffle.WithEncryptionKey(key))
					defer c.Close()
					writeWorkers(t, c, "q", 0, 2, n, partitions, nil)
					writeWorkers(t, c, "q", 1, 1, n, partitions, nil)
					if err := readErr(c, "q"); err != nil {
						t.Fatalf("untouched stage: %v", err)
					}
					fr := tc.tamper(t, c, "q")
					err := readErr(c, "q")
					var fe *reader.FrameError
					f := fr.w.Frames[fr.i]
					want := tc.want
					if want == nil {
						want = reader.ErrCorrupt
					}
					if !errors.As(err, &fe) || !errors.Is(err, want) || fe.Key != fr.key || fe.Partition != f.Partition || fe.Offset != f.Offset {
						t.Fatalf("tampered frame of partition %d at offset %d of %s: read error %v, want %v naming them", f.Partition, f.Offset, fr.key, err, want)
					}
					t.Logf("refused: %v", err)
				})
			}
			t.Run("keys", func(t *testing.T) {
				ctx := context.Background()
				st, counter := e.NewStore(t)
				cfg := encConfig(t, "off")
				cfg.Store.Prefix = "keys"
				c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter), durashuffle.WithEncryptionKey(key))
				defer c.Close()
				writeWorkers(t, c, "enc", 0, 1, 600, partitions, nil)
				plainC := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
				defer plainC.Close()
				writeWorkers(t, plainC, "plain", 0, 1, 600, partitions, nil)
				wrongC := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter), durashuffle.WithEncryptionKey(rootKey()))
				defer wrongC.Close()
				for _, k := range []struct {
					name  string
					c     *durashuffle.Client
					query string
					want  string
				}{
					{"wrong key", wrongC, "enc", "wrong key"},
					{"no key", plainC, "enc", "no key was given"},
					{"key for a plain stage", c, "plain", "not encrypted"},
				} {
					_, err := k.c.OpenStage(ctx, k.query, 0)
					if !errors.Is(err, reader.ErrKey) || !strings.Contains(err.Error(), k.query+" stage 0") || !strings.Contains(err.Error(), k.want) {
						t.Errorf("%s: open %s stage 0: %v, want ErrKey naming the stage and %q", k.name, k.query, err, k.want)
					}
				}
				if err := readErr(c, "enc"); err != nil {
					t.Fatalf("the right key: %v", err)
				}
				// Workers of one stage under two keys, or under a key and
				// none: seal refuses them, naming both, and commits no stage.
				for _, other := range []struct {
					name string
					c    *durashuffle.Client
				}{{"wrong-key", wrongC}, {"no-key", plainC}} {
					q := "mixed-" + other.name
					writeWorkers(t, c, q, 0, 1, 300, partitions, nil)
					writeOne(t, other.c, durashuffle.WriterOptions{Query: q, Worker: "1", Attempt: "a", Partitions: partitions})
					_, err := c.Seal(ctx, q, 0, 2)
					if err == nil || !strings.Contains(err.Error(), "one key or none") || !strings.Contains(err.Error(), "worker 0") || !strings.Contains(err.Error(), "worker 1") {
						t.Errorf("%s: seal of workers under different keys: %v, want a refusal naming both workers", other.name, err)
					}
					rc, err := st.GetRange(ctx, c.Layout().StageManifestKey(q, 0), 0, -1)
					if err == nil {
						rc.Close()
					}
					if !store.IsNotFound(err) {
						t.Errorf("%s: the refused seal's stage manifest: %v, want not found", other.name, err)
					}
				}
			})
		})
	}
}
