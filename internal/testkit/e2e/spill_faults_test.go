package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// spillFiles lists the run files of every process directory under a
// spill_dir.
func spillFiles(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "durashuffle-spill-*", "run-*.spill"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// spilledFile returns the one spill file under root and its size, failing
// t unless there is exactly one.
func spilledFile(t *testing.T, root string) (string, int64) {
	t.Helper()
	files := spillFiles(t, root)
	if len(files) != 1 {
		t.Fatalf("spill_dir %s holds spill files %v, want one", root, files)
	}
	fi, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return files[0], fi.Size()
}

// writeBatches writes rows [0, rows) in batches of 16 over every
// partition in turn, so that each run holds a piece of every partition,
// and returns the first error.
func writeBatches(w *durashuffle.Writer, rows, partitions int) error {
	for lo := 0; lo < rows; lo += 16 {
		rec := batch(lo, 16)
		err := w.Write((lo/16)%partitions, rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// noStageVisible fails t if query's stage 0 has a worker manifest or any
// object under the query's prefix.
func noStageVisible(t *testing.T, c *durashuffle.Client, st store.Store, query string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.OpenStage(ctx, query, 0); !errors.Is(err, manifest.ErrStageNotFound) {
		t.Fatalf("open %s stage 0: %v, want manifest.ErrStageNotFound", query, err)
	}
	objs, _, err := st.List(ctx, c.Layout().QueryPrefix(query), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 0 {
		keys := make([]string, len(objs))
		for i, o := range objs {
			keys[i] = o.Key
		}
		t.Fatalf("objects left under %s: %v", c.Layout().QueryPrefix(query), keys)
	}
}

// nothingCommitted is noStageVisible, and no multipart upload open in
// the bucket either.
func nothingCommitted(t *testing.T, c *durashuffle.Client, st store.Store, query string) {
	t.Helper()
	noStageVisible(t, c, st, query)
	if ups, err := st.ListUploads(context.Background(), ""); err != nil || len(ups) != 0 {
		t.Fatalf("uploads left open: %v %v", ups, err)
	}
}

// readRows reads partitions ps of query's stage 0 and returns the rows.
func readRows(t *testing.T, c *durashuffle.Client, query string, ps []int) int64 {
	t.Helper()
	ctx := context.Background()
	stage, err := c.OpenStage(ctx, query, 0)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := stage.ReadPartitions(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	var n int64
	for rr.Next() {
		n += rr.RecordBatch().NumRows()
	}
	if err := rr.Err(); err != nil {
		t.Fatalf("read %s back: %v", query, err)
	}
	return n
}

// TestSpillMultiples: writers whose output is 1, 4 and 16 times their
// coalesce_budget, with spill on and off. With spill on each object
// holds one run whatever the multiple: a reader of a partition range
// makes at most one data GET per writer object per read_range_bytes of
// what it reads from it (here under read_range_bytes: one per writer),
// as many at 4x and 16x as at 1x, and a row stores as many bytes at 16x
// as at 1x. With spill off the runs stay as flushed and a reader's GETs
// grow with them. Every reader reads back the rows written to its
// partitions.
func TestSpillMultiples(t *testing.T) {
	const (
		writers    = 2
		partitions = 32
		readers    = 4
		budget     = durashuffle.MiB
		readRange  = 8 * durashuffle.MiB
		rowsPer1x  = 1024 // rows of ~1 KiB: one coalesce_budget of output
	)
	multiples := []int{1, 4, 16}
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		type outcome struct {
			gets   []int64 // data GETs per reader
			bound  []int64 // one per object per read_range_bytes read from it
			rows   int64   // per writer
			stored int64
			runs   int // ascending runs of partitions in worker 0's object
		}
		spillRoot := t.TempDir()
		run := func(query, spillMode string, multiple int) outcome {
			ctx := context.Background()
			cfg := testConfig()
			cfg.Write.Spill, cfg.Write.SpillDir, cfg.Write.CoalesceBudget, cfg.Read.RangeBytes = spillMode, spillRoot, budget, readRange
			gets := &dataGets{Store: st}
			c := testenv.Client(t, cfg, durashuffle.WithStore(gets), durashuffle.WithCounter(counter))
			defer c.Close()
			out := outcome{rows: int64(multiple * rowsPer1x)}
			var ms []*manifest.Worker
			for wk := range writers {
				w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: fmt.Sprint(wk), Partitions: partitions})
				if err != nil {
					t.Fatal(err)
				}
				if err := writeBatches(w, int(out.rows), partitions); err != nil {
					t.Fatal(err)
				}
				m, err := w.Commit(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if m.Totals.Rows != out.rows || len(m.Objects) != 1 {
					t.Fatalf("%s worker %d: %d rows in %d objects, want %d rows in one", query, wk, m.Totals.Rows, len(m.Objects), out.rows)
				}
				ms = append(ms, m)
				out.stored += m.Totals.BytesStored
				if wk == 0 {
					out.runs = ascending(m)
				}
			}
			if _, err := c.Seal(ctx, query, 0, writers); err != nil {
				t.Fatal(err)
			}
			per := partitions / readers
			for r := range readers {
				lo, hi := r*per, (r+1)*per
				var bound int64
				for _, m := range ms {
					read := make([]int64, len(m.Objects))
					for _, f := range m.Frames {
						if f.Partition >= lo && f.Partition < hi {
							read[f.Object] += f.Length
						}
					}
					for _, n := range read {
						bound += ceilDiv(n, int64(readRange))
					}
				}
				ps := make([]int, 0, per)
				for p := lo; p < hi; p++ {
					ps = append(ps, p)
				}
				before := gets.n.Load()
				n := readRows(t, c, query, ps)
				if want := writers * out.rows / readers; n != want {
					t.Fatalf("%s reader %d: %d rows, want %d", query, r, n, want)
				}
				out.gets = append(out.gets, gets.n.Load()-before)
				out.bound = append(out.bound, bound)
			}
			return out
		}
		on := map[int]outcome{}
		off := map[int]outcome{}
		for _, m := range multiples {
			on[m] = run(fmt.Sprintf("on-%dx", m), "on", m)
			off[m] = run(fmt.Sprintf("off-%dx", m), "off", m)
			t.Logf("%2dx: spill on: data GETs per reader %v (bound %v), %d runs, %d bytes stored; spill off: %v, %d runs, %d bytes",
				m, on[m].gets, on[m].bound, on[m].runs, on[m].stored, off[m].gets, off[m].runs, off[m].stored)
		}
		for _, m := range multiples {
			o, f := on[m], off[m]
			if o.runs != 1 {
				t.Fatalf("%dx with spill on: worker 0's object holds %d runs, want 1", m, o.runs)
			}
			for r, n := range o.gets {
				// What each reader reads from an object stays under
				// read_range_bytes, so the bound is one per writer.
				if o.bound[r] != writers {
					t.Fatalf("%dx reader %d: bound %d GETs, want %d (one per writer): the test reads more than read_range_bytes", m, r, o.bound[r], writers)
				}
				if n > o.bound[r] || n != on[1].gets[r] {
					t.Fatalf("%dx reader %d made %d data GETs with spill on, want at most %d and as many as at 1x (%d)", m, r, n, o.bound[r], on[1].gets[r])
				}
				// Spill off: a GET per run per writer, the runs too far
				// apart for read_gap_bytes to join; but the last run,
				// Close's, may hold none of a reader's partitions.
				if want := int64(writers * (f.runs - 1)); f.gets[r] < want {
					t.Fatalf("%dx reader %d made %d data GETs with spill off, want at least %d (%d runs but the last x %d writers)", m, r, f.gets[r], want, f.runs-1, writers)
				}
				if m > 1 && f.gets[r] <= off[m/4].gets[r] {
					t.Fatalf("reader %d made %d data GETs with spill off at %dx, no more than the %d at %dx", r, f.gets[r], m, off[m/4].gets[r], m/4)
				}
			}
		}
		if off[16].runs < 16 {
			t.Fatalf("16x with spill off: worker 0's object holds %d runs, want at least 16", off[16].runs)
		}
		perRow := func(o outcome) float64 { return float64(o.stored) / float64(writers*o.rows) }
		if ratio := perRow(on[16]) / perRow(on[1]); ratio > 1.03 {
			t.Fatalf("with spill on a row stores %.3fx the bytes at 16x as at 1x, want at most 1.03x", ratio)
		}
		if files := spillFiles(t, spillRoot); len(files) != 0 {
			t.Fatalf("after the clients closed, spill_dir holds %v", files)
		}
	})
}

// TestSpillLimitOnStore: a writer whose spill would pass spill_bytes
// fails naming spill_dir, the bytes and the limit, and leaves nothing: no
// worker manifest, no object, no open upload, no spill file. Its bytes go
// back to the limit: the next writer of the same client, whose spill
// fits what the failed one held, spills, commits and reads back.
func TestSpillLimitOnStore(t *testing.T) {
	const (
		partitions = 16
		limit      = 2 * durashuffle.MiB
	)
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		spillRoot := t.TempDir()
		cfg := testConfig()
		cfg.Write.SpillDir, cfg.Write.CoalesceBudget, cfg.Write.SpillBytes = spillRoot, durashuffle.MiB, limit
		c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()

		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "big", Worker: "0", Partitions: partitions})
		if err != nil {
			t.Fatal(err)
		}
		// 8 MiB of output: four times spill_bytes.
		werr := writeBatches(w, 8192, partitions)
		m, cerr := w.Commit(ctx)
		if cerr == nil {
			t.Fatalf("a writer that spills 8 MiB past a %d-byte spill_bytes committed %d rows (Write: %v)", limit, m.Totals.Rows, werr)
		}
		err = cerr
		if werr != nil {
			err = werr
		}
		if !errors.Is(err, spill.ErrLimit) {
			t.Fatalf("err = %v, want the spill limit's", err)
		}
		want := regexp.MustCompile(`spill limit reached: a writer needs \d+ more bytes in ` + regexp.QuoteMeta(spillRoot) +
			`, where this process's writers hold \d+ bytes of its ` + strconv.FormatInt(int64(limit), 10) + `-byte limit \(spill_bytes\)`)
		if !want.MatchString(err.Error()) {
			t.Fatalf("error %q does not match %v", err, want)
		}
		t.Logf("Write: %v; Commit: %v", werr, cerr)
		// The limit is met while the writer takes input, before it has
		// uploaded anything (TestSpillFlippedByteOnStore fails one with
		// a part stored).
		nothingCommitted(t, c, st, "big")
		if files := spillFiles(t, spillRoot); len(files) != 0 {
			t.Fatalf("after the failure spill_dir holds %v", files)
		}

		// 1.5 budgets of output: the first run spills, well within the
		// limit once the failed writer's bytes are given back.
		w, err = c.NewWriter(ctx, durashuffle.WriterOptions{Query: "small", Worker: "0", Partitions: partitions})
		if err != nil {
			t.Fatal(err)
		}
		if err := writeBatches(w, 1536, partitions); err != nil {
			t.Fatalf("a writer whose spill fits the limit the failed writer gave back: %v", err)
		}
		name, size := spilledFile(t, spillRoot)
		if size == 0 {
			t.Fatalf("the second writer's spill %s is empty before Commit", name)
		}
		if m, err = w.Commit(ctx); err != nil {
			t.Fatalf("a writer whose %d-byte spill fits the limit the failed writer gave back: %v", size, err)
		}
		if n := readRows(t, c, "small", nil); n != 1536 || m.Totals.Rows != 1536 {
			t.Fatalf("read %d rows, manifest says %d, want 1536", n, m.Totals.Rows)
		}
		if files := spillFiles(t, spillRoot); len(files) != 0 {
			t.Fatalf("after Commit spill_dir holds %v", files)
		}
	})
}

// TestSpillFlippedByteOnStore: a byte changed in a writer's spill file
// between Write and Commit fails the Commit with an error naming the
// file and its CRC32C once the frame is read back, and leaves nothing:
// no worker manifest, no object, no open upload, no spill file. Uploaded
// in chunks, the object's first part is stored (then aborted) before
// the frame is read; uploaded from its file, the object's file is
// removed too.
func TestSpillFlippedByteOnStore(t *testing.T) {
	const partitions = 16
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		for _, tc := range []struct {
			name string
			file bool
		}{{"chunks", false}, {"file", true}} {
			t.Run(tc.name, func(t *testing.T) {
				query := "flipped-" + tc.name
				ctx := context.Background()
				spillRoot := t.TempDir()
				cfg := testConfig()
				cfg.Write.SpillDir, cfg.Write.CoalesceBudget = spillRoot, durashuffle.MiB
				// One chunk in memory and one encoder: at Commit the appender
				// waits for part 1 to be stored before it fills part 2, and the
				// encoders read back no more than a few frames ahead of it, so
				// the last partition's frames, 12 MiB into the object, are read
				// only once the multipart upload holds a part.
				cfg.Write.MaxBufferedChunks, cfg.Write.EncodeConcurrency = 1, 1
				// Chunks: spill_bytes has room for the runs (about 16 MiB) and
				// not for the object beside them, so the object goes out in
				// chunks, held back by the one chunk buffer. File: the object is
				// written to a file beside the runs, which the merge fills ahead
				// of the uploads; a part may or may not be stored first.
				if !tc.file {
					cfg.Write.SpillBytes = 20 * durashuffle.MiB
				}
				c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
				defer c.Close()
				w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: partitions})
				if err != nil {
					t.Fatal(err)
				}
				// 12 MiB over partitions 0 to 14, then 4 MiB to partition 15:
				// the spill file ends with partition 15's frames.
				for lo := 0; lo < 16384; lo += 16 {
					p := partitions - 1
					if lo < 12288 {
						p = (lo / 16) % (partitions - 1)
					}
					rec := batch(lo, 16)
					err := w.Write(p, rec)
					rec.Release()
					if err != nil {
						t.Fatal(err)
					}
				}
				// Once Write returns, at most coalesce_budget of the 16 MiB is
				// not on disk yet, and only the file's last frame may be still
				// being written: 1 MiB before the end is inside a frame of
				// partition 15 written whole.
				name, size := spilledFile(t, spillRoot)
				if size < int64(14*durashuffle.MiB) {
					t.Fatalf("after 16 MiB of output with a 1 MiB coalesce_budget the spill %s holds %d bytes, want at least 14 MiB", name, size)
				}
				f, err := os.OpenFile(name, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				var b [1]byte
				off := size - int64(durashuffle.MiB)
				if _, err := f.ReadAt(b[:], off); err != nil {
					t.Fatal(err)
				}
				b[0] ^= 0x40
				if _, err := f.WriteAt(b[:], off); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				before := counter.Requests()
				m, err := w.Commit(ctx)
				if err == nil {
					t.Fatalf("Commit after a byte flipped at %d of %s committed %d rows", off, name, m.Totals.Rows)
				}
				for _, s := range []string{"spill " + name + ": frame of partition 15 ", "CRC32C", "the spill file changed on disk"} {
					if !strings.Contains(err.Error(), s) {
						t.Fatalf("Commit after a flipped spill byte: %q does not say %q", err, s)
					}
				}
				nothingCommitted(t, c, st, query)
				// What the upload's absence means: there was one, with a part.
				req := reqs.Diff(counter.Requests(), before)
				t.Logf("Commit: %v; requests %v", err, req)
				if !tc.file && (req["UploadPart"] < 1 || req["AbortMultipartUpload"] < 1) {
					t.Fatalf("requests %v: want the object's first part stored, then its upload aborted", req)
				}
				if files := spillFiles(t, spillRoot); len(files) != 0 {
					t.Fatalf("after the failure spill_dir holds %v", files)
				}
			})
		}
	})
}

// spillChildEnv makes the test binary a process that spills and waits to
// be killed (spillChild); its value is a spillChildSpec in JSON.
const spillChildEnv = "DURASHUFFLE_TEST_SPILL_CHILD"

type spillChildSpec struct {
	Endpoint testenv.Endpoint
	SpillDir string
	Query    string
}

// spillChild opens a client on the spec's endpoint, writes worker 0 of
// the query until its spill file holds bytes, prints "spilled FILE" and
// waits to be killed. On failure it prints "error ..." and exits.
func spillChild(spec string) {
	fail := func(err error) {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	var s spillChildSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fail(err)
	}
	ctx := context.Background()
	st, err := s3store.New(ctx, s.Endpoint.Options(nil))
	if err != nil {
		fail(err)
	}
	cfg := testConfig()
	cfg.Write.SpillDir, cfg.Write.CoalesceBudget = s.SpillDir, durashuffle.MiB
	c, err := durashuffle.Open(ctx, cfg, durashuffle.WithStore(st))
	if err != nil {
		fail(err)
	}
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: s.Query, Worker: "0", Partitions: 16})
	if err != nil {
		fail(err)
	}
	for range 64 { // 1 MiB at a time, up to 64 MiB
		if err := writeBatches(w, 1024, 16); err != nil {
			fail(err)
		}
		files, _ := filepath.Glob(filepath.Join(s.SpillDir, "durashuffle-spill-*", "run-*.spill"))
		if len(files) == 1 {
			if fi, err := os.Stat(files[0]); err == nil && fi.Size() > 0 {
				fmt.Printf("spilled %s\n", files[0])
				for {
					time.Sleep(time.Hour) // until killed
				}
			}
		}
	}
	fail(fmt.Errorf("no spill file in %s after 64 MiB of output with a 1 MiB coalesce_budget", s.SpillDir))
}

// TestSpillKilledMidSpill: a process killed with SIGKILL while its writer
// spills leaves its spill directory behind and nothing visible in the
// stage; the next client opened on the same spill_dir removes the dead
// directory, and a new attempt of the worker commits and reads back.
func TestSpillKilledMidSpill(t *testing.T) {
	if spec := os.Getenv(spillChildEnv); spec != "" {
		spillChild(spec) // never returns
	}
	// forEach's stores are of this process; the child needs the endpoint.
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Start(t)
			st, counter := e.NewStore(t)
			spillRoot := t.TempDir()
			spec, err := json.Marshal(spillChildSpec{Endpoint: e, SpillDir: spillRoot, Query: "killed"})
			if err != nil {
				t.Fatal(err)
			}
			// The timeout only bounds a child that hangs: the test waits
			// for its line, not for a time.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSpillKilledMidSpill$")
			cmd.Env = append(os.Environ(), spillChildEnv+"="+string(spec))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			name, ok := strings.CutPrefix(strings.TrimSpace(line), "spilled ")
			if err := cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			werr := cmd.Wait()
			if !ok {
				t.Fatalf("child: %q, %v (exit: %v)\n%s", line, err, werr, stderr.String())
			}
			if werr == nil || !strings.Contains(werr.Error(), "killed") {
				t.Fatalf("child exit: %v, want killed", werr)
			}
			dead := filepath.Dir(name)
			if fi, err := os.Stat(name); err != nil || fi.Size() == 0 || filepath.Dir(dead) != spillRoot {
				t.Fatalf("the killed process's spill %s (%v): want a non-empty file in a directory of its own under %s", name, err, spillRoot)
			}

			cfg := testConfig()
			cfg.Write.SpillDir, cfg.Write.CoalesceBudget = spillRoot, durashuffle.MiB
			c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
			defer c.Close()
			if _, err := os.Stat(dead); !os.IsNotExist(err) {
				t.Fatalf("the killed process's spill directory %s is still there after the next client opened (%v)", dead, err)
			}
			if ents, err := os.ReadDir(spillRoot); err != nil || len(ents) != 0 {
				t.Fatalf("spill_dir %s holds %d entries (%v), want none", spillRoot, len(ents), err)
			}
			noStageVisible(t, c, st, "killed")
			ups, err := st.ListUploads(context.Background(), c.Layout().QueryPrefix("killed"))
			if err != nil {
				t.Fatal(err)
			}
			// Killed after a few MiB of input, the writer had no
			// multipart upload yet; one created before a later kill is
			// gc's to abort.
			t.Logf("uploads open under the query after the kill: %v", ups)

			w, err := c.NewWriter(context.Background(), durashuffle.WriterOptions{Query: "killed", Worker: "0", Partitions: 16})
			if err != nil {
				t.Fatal(err)
			}
			if err := writeBatches(w, 2048, 16); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := readRows(t, c, "killed", nil); n != 2048 {
				t.Fatalf("read %d rows after the new attempt committed, want 2048", n)
			}
		})
	}
}
