package combine_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "blob", Type: arrow.BinaryTypes.Binary},
}, nil)

// env is a client on a fresh bucket of one backend, the raw store under
// it (no retries) and the counter of the store's requests.
type env struct {
	c       *durashuffle.Client
	st      store.Store
	counter *store.Counter
}

func forEachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, newEnv(t, b.Start(t))) })
	}
}

func newEnv(t *testing.T, ep testenv.Endpoint) *env {
	st, counter := ep.NewStore(t)
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket = ep.Bucket
	cfg.Write.ChunkSize = 5 * durashuffle.MiB
	cfg.Write.UploadConcurrency = 4
	c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
	t.Cleanup(c.Close)
	return &env{c: c, st: st, counter: counter}
}

// writeStage writes a stage of W workers x P partitions, rows rows of
// blob bytes in each (worker, partition), and seals it. Row ids are
// unique; blobs are random (incompressible), so stored bytes are about
// W x P x rows x blob.
func writeStage(t *testing.T, e *env, query string, W, P, rows, blob int) {
	t.Helper()
	ctx := context.Background()
	for w := range W {
		if err := commitWorker(t, e, query, w, P, rows, blob); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.c.Seal(ctx, query, 0, W); err != nil {
		t.Fatal(err)
	}
}

func batch(lo int64, n, blob int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	buf := make([]byte, blob)
	for i := lo; i < lo+int64(n); i++ {
		r := rand.New(rand.NewPCG(uint64(i), 11))
		for j := range buf {
			buf[j] = byte(r.Uint32())
		}
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.BinaryBuilder).Append(buf)
	}
	return b.NewRecordBatch()
}

// partitionDigest is what a reader of one partition sees: its rows and
// a hash of every value, in order.
type partitionDigest struct {
	Rows int64
	Hash [32]byte
}

// readEach opens the stage once per partition, as R = P readers would,
// and reads that partition; it returns each partition's digest and the
// GETs the readers made.
func readEach(t *testing.T, e *env, query string, P int) ([]partitionDigest, int64) {
	t.Helper()
	ctx := context.Background()
	before := e.counter.Requests()
	out := make([]partitionDigest, P)
	for p := range P {
		s, err := e.c.OpenStage(ctx, query, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = digest(t, s, p)
	}
	d := reqs.Diff(e.counter.Requests(), before)
	if len(d) != 1 {
		t.Errorf("readers made %v, want GETs only", d)
	}
	return out, d["GetObject"]
}

func digest(t *testing.T, s *reader.Stage, p int) partitionDigest {
	t.Helper()
	recs, err := s.ReadPartitions(context.Background(), []int{p})
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Close()
	h := sha256.New()
	var d partitionDigest
	for recs.Next() {
		rec := recs.RecordBatch()
		ids := rec.Column(0).(*array.Int64)
		blobs := rec.Column(1).(*array.Binary)
		for i := range int(rec.NumRows()) {
			h.Write(binary.LittleEndian.AppendUint64(nil, uint64(ids.Value(i))))
			h.Write(blobs.Value(i))
		}
		d.Rows += rec.NumRows()
	}
	if err := recs.Err(); err != nil {
		t.Fatalf("partition %d: %v", p, err)
	}
	copy(d.Hash[:], h.Sum(nil))
	return d
}

// sealAsPredicted seals s and checks that combining, since start, made
// the requests its plan predicted, and that the stage's 2 partitions
// read as before.
func sealAsPredicted(t *testing.T, e *env, s *combine.Stage, start map[string]int64, before []partitionDigest, what string) {
	t.Helper()
	if _, err := s.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
	spent := reqs.Diff(e.counter.Requests(), start)
	if pr := s.Plan().Predict; putClass(spent) != pr.Combine.PUT || spent["GetObject"] != pr.Combine.GET {
		t.Errorf("%s made %d PUT-class requests and %d GETs, the plan predicted %d and %d", what, putClass(spent), spent["GetObject"], pr.Combine.PUT, pr.Combine.GET)
	}
	if after, _ := readEach(t, e, s.Plan().Query, len(before)); !slices.Equal(after, before) {
		t.Errorf("%s: %+v, as written: %+v", what, after, before)
	}
}

// putClass is the PUT-class requests among spent, as the plan predicts
// them (LISTs are PUT-class).
func putClass(spent map[string]int64) int64 {
	return spent["PutObject"] + spent["CreateMultipartUpload"] + spent["UploadPart"] + spent["CompleteMultipartUpload"] + spent["ListObjectsV2"]
}

// within says whether got is within 10% of want.
func within(got, want int64) bool {
	diff := got - want
	if diff < 0 {
		diff = -diff
	}
	return diff*10 <= want
}

// TestCombineSameRowsFewerGETs: a stage combined into G x J tasks reads
// back the same rows, partition by partition and in the same order, and
// its R = P readers make G data GETs per partition instead of W; the
// plan's predictions are within 10% of the requests counted. A reader
// that opened the stage before the seal keeps reading the first level.
func TestCombineSameRowsFewerGETs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const W, P, G, J = 8, 8, 2, 4
		writeStage(t, e, "q", W, P, 20, 1000)
		direct, directGETs := readEach(t, e, "q", P)
		old, err := e.c.OpenStage(ctx, "q", 0)
		if err != nil {
			t.Fatal(err)
		}

		before := e.counter.Requests()
		cs, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: G, Buckets: J})
		if err != nil {
			t.Fatal(err)
		}
		plan := cs.Plan()
		if plan.Tasks() != G*J || len(plan.Groups) != G || len(plan.Buckets) != J || plan.Objects != W || plan.Readers != P {
			t.Fatalf("plan %+v", plan)
		}
		tasks, err := cs.RunAll(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range tasks {
			if !tk.Wrote || len(tk.Manifest.Objects) != 1 {
				t.Fatalf("task %d: wrote %v, %d objects", tk.N, tk.Wrote, len(tk.Manifest.Objects))
			}
		}
		sealed, err := cs.Seal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		spent := reqs.Diff(e.counter.Requests(), before)
		if !combine.IsCombined(sealed) || len(sealed.Workers) != G*J || sealed.Totals.Rows != int64(W*P*20) {
			t.Fatalf("combined level: %d workers, %d rows", len(sealed.Workers), sealed.Totals.Rows)
		}

		combined, combinedGETs := readEach(t, e, "q", P)
		for p := range P {
			if direct[p] != combined[p] || direct[p].Rows != int64(W*20) {
				t.Errorf("partition %d: %d rows %x direct, %d rows %x combined", p, direct[p].Rows, direct[p].Hash[:6], combined[p].Rows, combined[p].Hash[:6])
			}
		}
		// Each reader: the stage manifest, its index entries, and one
		// GET per object holding its partition: W first, G combined.
		if directGETs != int64(P*(2+W)) || combinedGETs != int64(P*(2+G)) {
			t.Errorf("readers made %d GETs direct, %d combined; want %d and %d", directGETs, combinedGETs, P*(2+W), P*(2+G))
		}
		pr := plan.Predict
		puts := putClass(spent)
		t.Logf("%d x %d, G=%d J=%d: readers %d GETs direct (predicted %d), %d combined (predicted %d); combining %d GETs (predicted %d), %d PUT-class (predicted %d): %v",
			W, P, G, J, directGETs, pr.Direct.GET, combinedGETs, pr.Combined.GET, spent["GetObject"], pr.Combine.GET, puts, pr.Combine.PUT, spent)
		for _, c := range []struct {
			what      string
			got, want int64
		}{{"direct GETs", directGETs, pr.Direct.GET}, {"combined GETs", combinedGETs, pr.Combined.GET},
			{"combining GETs", spent["GetObject"], pr.Combine.GET}, {"combining PUTs", puts, pr.Combine.PUT}} {
			if !within(c.got, c.want) {
				t.Errorf("%s: %d measured, %d predicted: more than 10%% apart", c.what, c.got, c.want)
			}
		}

		// The reader opened before the seal reads the first level.
		for p := range P {
			if d := digest(t, old, p); d != direct[p] {
				t.Errorf("partition %d read through the stage opened before the seal differs", p)
			}
		}
		if !strings.HasPrefix(old.Manifest().Workers[0].Objects[0].Key, "worker-") {
			t.Errorf("the stage opened before names %s", old.Manifest().Workers[0].Objects[0].Key)
		}

		// Combining again is a no-op: the stage is combined.
		again, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: G, Buckets: J})
		if err != nil || again.Combined() == nil || again.Plan() != nil {
			t.Fatalf("reopen: %v", err)
		}
		if s2, err := again.Seal(ctx); err != nil || s2.Index.Key != sealed.Index.Key {
			t.Fatalf("second seal: %v", err)
		}
	})
}

// TestCombineDefaultPlan: with the default sizes a small stage is one
// task, and a partition's reader makes one data GET.
func TestCombineDefaultPlan(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	writeStage(t, e, "d", 4, 6, 10, 500)
	direct, _ := readEach(t, e, "d", 6)
	cs, err := e.c.Combine(ctx, "d", 0, combine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cs.Plan().Tasks() != 1 {
		t.Fatalf("plan %+v", cs.Plan())
	}
	if _, err := cs.RunAll(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	combined, gets := readEach(t, e, "d", 6)
	if gets != 6*3 {
		t.Errorf("readers made %d GETs, want 18", gets)
	}
	for p := range direct {
		if direct[p] != combined[p] {
			t.Errorf("partition %d differs", p)
		}
	}
}

// dataKeys lists the keys under a plan's folder.
func planKeys(t *testing.T, e *env, plan string) []string {
	t.Helper()
	objs, _, err := e.st.List(context.Background(), e.c.Layout().StagePrefix("q", 0)+manifest.PlanDir(plan), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, strings.TrimPrefix(o.Key, e.c.Layout().StagePrefix("q", 0)))
	}
	return out
}

// TestCombineConcurrentAttempts: two attempts of one task at once both
// return the task that won; one object stays. A rerun of the committed
// task is one GET and changes nothing.
func TestCombineConcurrentAttempts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		writeStage(t, e, "q", 4, 4, 20, 1000)
		o := combine.Options{Groups: 2, Buckets: 2}
		var a, b *combine.Stage
		var err error
		if a, err = combine.Open(ctx, e.st, e.c.Layout(), "q", 0, o); err != nil {
			t.Fatal(err)
		}
		if b, err = combine.Open(ctx, e.st, e.c.Layout(), "q", 0, o); err != nil {
			t.Fatal(err)
		}
		if a.Plan().ID != b.Plan().ID {
			t.Fatalf("plans %s and %s of one stage", a.Plan().ID, b.Plan().ID)
		}
		var wg sync.WaitGroup
		got := make([]*combine.Task, 2)
		errs := make([]error, 2)
		for i, s := range []*combine.Stage{a, b} {
			wg.Go(func() { got[i], errs[i] = s.RunTask(ctx, 1) })
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		if got[0].Manifest.Attempt != got[1].Manifest.Attempt || got[0].Manifest.Objects[0] != got[1].Manifest.Objects[0] {
			t.Fatalf("attempts returned %s and %s", got[0].Manifest.Attempt, got[1].Manifest.Attempt)
		}
		keys := planKeys(t, e, a.Plan().ID)
		want := []string{manifest.TaskManifestName(a.Plan().ID, 1), got[0].Manifest.Objects[0].Key}
		if fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Fatalf("left %v, want %v", keys, want)
		}
		if ups, err := e.st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
			t.Fatalf("uploads left: %v %v", ups, err)
		}
		before := e.counter.Requests()
		rerun, err := a.RunTask(ctx, 1)
		if err != nil || rerun.Wrote || rerun.Manifest.Attempt != got[0].Manifest.Attempt {
			t.Fatalf("rerun: %v", err)
		}
		if d := reqs.Diff(e.counter.Requests(), before); fmt.Sprint(d) != "map[GetObject:1]" {
			t.Errorf("a rerun of a committed task made %v, want one GET", d)
		}
	})
}

// cutStore cancels its context at the first request that cut says to
// cut, failing that request as the cancel would.
type cutStore struct {
	store.Store
	cut    func(op, key string) bool
	cancel context.CancelFunc
	once   sync.Once
	hit    bool
}

func (s *cutStore) check(ctx context.Context, op, key string) error {
	if s.cut(op, key) {
		s.once.Do(func() { s.hit = true; s.cancel() })
		return fmt.Errorf("%s %s: %w", op, key, context.Cause(ctx))
	}
	return nil
}

func (s *cutStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	if err := s.check(ctx, "Put", key); err != nil {
		return err
	}
	return s.Store.Put(ctx, key, body, o)
}

func (s *cutStore) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	if n == 2 {
		if err := s.check(ctx, "UploadPart", key); err != nil {
			return store.Part{}, err
		}
	}
	return s.Store.UploadPart(ctx, key, id, n, body)
}

func (s *cutStore) CompleteMultipart(ctx context.Context, key, id string, parts []store.Part) error {
	err := s.Store.CompleteMultipart(ctx, key, id, parts)
	if err == nil && s.cut("CompleteAfter", key) {
		// Completed, and then the task is killed.
		s.once.Do(func() { s.hit = true; s.cancel() })
	}
	return err
}

// TestCombineKilledTask: a task whose context ends midway (in its
// upload, or after its object is complete) leaves no object and no
// upload; one cut off in its manifest's put leaves its object, which the
// put may still name, until gc; a later run of it commits.
func TestCombineKilledTask(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		// One task of about 12 MiB: three parts of 5 MiB.
		writeStage(t, e, "q", 3, 2, 20, 100_000)
		o := combine.Options{Groups: 1, Buckets: 1, PartBytes: 5 << 20}
		var planID string
		for _, at := range []string{"UploadPart", "CompleteAfter", "manifest"} {
			t.Run(at, func(t *testing.T) {
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				cs := &cutStore{Store: e.st, cancel: cancel, cut: func(op, key string) bool {
					switch at {
					case "manifest":
						return op == "Put" && strings.HasSuffix(key, ".bin")
					default:
						return op == at
					}
				}}
				s, err := combine.Open(cctx, cs, e.c.Layout(), "q", 0, o)
				if err != nil {
					t.Fatal(err)
				}
				planID = s.Plan().ID
				if _, err := s.RunTask(cctx, 0); err == nil || !cs.hit {
					t.Fatalf("a killed task returned %v (cut: %v)", err, cs.hit)
				}
				keys := planKeys(t, e, planID)
				if at == "manifest" {
					// The manifest's put was cut off: it might still land,
					// so the object it names stays, named by no manifest
					// the stage's readers or seal see, until gc judges
					// the plan's keys stale.
					if len(keys) != 1 || !strings.Contains(keys[0], "/data-") {
						t.Fatalf("a task killed at its manifest left %v; want its data object alone", keys)
					}
					now := time.Now().Add(2 * time.Hour)
					if _, err := gc.Run(ctx, e.st, e.c.Layout(), gc.Options{OlderThan: time.Hour, ResultsRetention: time.Hour, Now: func() time.Time { return now }}); err != nil {
						t.Fatal(err)
					}
					keys = planKeys(t, e, planID)
				}
				if len(keys) != 0 {
					t.Errorf("a task killed at %s left %v", at, keys)
				}
				if ups, err := e.st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
					t.Errorf("a task killed at %s left uploads %v %v", at, ups, err)
				}
			})
		}
		s, err := combine.Open(ctx, e.st, e.c.Layout(), "q", 0, o)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := s.RunTask(ctx, 0)
		if err != nil || !tk.Wrote || tk.Manifest.Objects[0].Parts != 3 {
			t.Fatalf("run after the kills: %v %+v", err, tk)
		}
	})
}

// TestCombineSealMissingTask: a seal with a task missing is refused,
// naming the task, and writes nothing; the stage still reads its first
// level.
func TestCombineSealMissingTask(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		writeStage(t, e, "q", 4, 4, 10, 1000)
		s, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 2, Buckets: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{0, 1, 3} {
			if _, err := s.RunTask(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
		_, err = s.Seal(ctx)
		b := s.Plan().Buckets[1]
		if !errors.Is(err, combine.ErrMissingTasks) || !strings.Contains(err.Error(), "1 of 4 tasks have no manifest") ||
			!strings.Contains(err.Error(), fmt.Sprintf("task 2 (group 0, bucket 1: partitions [%d, %d))", b.Lo, b.Hi)) {
			t.Fatalf("seal with task 2 missing: %v", err)
		}
		if _, err := e.st.GetRange(ctx, e.c.Layout().StagePrefix("q", 0)+combine.CombinedName, 0, -1); !store.IsNotFound(err) {
			t.Errorf("a refused seal wrote the combined manifest: %v", err)
		}
		m, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), "q", 0)
		if err != nil || combine.IsCombined(m) {
			t.Fatalf("the stage manifest after a refused seal: combined %v, %v", combine.IsCombined(m), err)
		}
		if keys := planKeys(t, e, s.Plan().ID); len(keys) != 6 {
			t.Errorf("plan folder holds %v, want 3 manifests and 3 objects", keys)
		}
	})
}

// TestCombineFlippedByte: a byte flipped in a writer object's frame
// fails the task naming the object and the frame; nothing is written.
func TestCombineFlippedByte(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		writeStage(t, e, "q", 4, 4, 10, 1000)
		m, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), "q", 0)
		if err != nil {
			t.Fatal(err)
		}
		// Worker 3's frame of partition 2.
		fs, err := m.Frames(ctx, e.st, e.c.Layout(), []int{2})
		if err != nil {
			t.Fatal(err)
		}
		var f manifest.Frame
		for _, x := range fs {
			if x.Worker == 3 {
				f = x
			}
		}
		key := e.c.Layout().ObjectKey("q", 0, m.Workers[3].Objects[f.Object].Key)
		body, err := e.st.GetRange(ctx, key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(body)
		body.Close()
		if err != nil {
			t.Fatal(err)
		}
		b[f.Offset+f.Length/2] ^= 0x40
		if err := e.st.Put(ctx, key, b, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		s, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 2, Buckets: 2})
		if err != nil {
			t.Fatal(err)
		}
		// The task that reads it: worker 3's group, partition 2's bucket.
		bad, other := -1, -1
		for n := range s.Plan().Tasks() {
			g, j := s.Plan().Task(n)
			gr, b := s.Plan().Groups[g], s.Plan().Buckets[j]
			if gr.Lo <= 3 && 3 < gr.Hi && b.Lo <= 2 && 2 < b.Hi {
				bad = n
			} else {
				other = n
			}
		}
		_, err = s.RunTask(ctx, bad)
		var fe *reader.FrameError
		want := fmt.Sprintf("frame of partition 2 at offset %d (%d bytes) of %s (worker 3)", f.Offset, f.Length, key)
		if !errors.Is(err, reader.ErrChecksum) || !errors.As(err, &fe) || fe.Key != key || fe.Offset != f.Offset || !strings.Contains(err.Error(), want) {
			t.Fatalf("task over a flipped byte: %v\nwant it to name %q", err, want)
		}
		if keys := planKeys(t, e, s.Plan().ID); len(keys) != 0 {
			t.Errorf("a failed task left %v", keys)
		}
		// The other tasks do not read that frame.
		if _, err := s.RunTask(ctx, other); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCombineMeasured: at 16 x 16 and 64 x 64 on the embedded server,
// with the default plan and with 4 x 4 tasks, the readers' GETs and
// combining's requests are within 10% of the plan's predictions, and
// the rows are the same.
func TestCombineMeasured(t *testing.T) {
	for _, c := range []struct{ W, P, G, J int }{{16, 16, 0, 0}, {16, 16, 4, 4}, {64, 64, 0, 0}, {64, 64, 4, 4}} {
		t.Run(fmt.Sprintf("%dx%d_G%d_J%d", c.W, c.P, c.G, c.J), func(t *testing.T) {
			e := newEnv(t, testenv.Embedded(t))
			ctx := context.Background()
			writeStage(t, e, "q", c.W, c.P, 4, 1000)
			direct, directGETs := readEach(t, e, "q", c.P)
			before := e.counter.Requests()
			cs, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: c.G, Buckets: c.J})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cs.RunAll(ctx, 4); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.Seal(ctx); err != nil {
				t.Fatal(err)
			}
			spent := reqs.Diff(e.counter.Requests(), before)
			combined, combinedGETs := readEach(t, e, "q", c.P)
			for p := range direct {
				if direct[p] != combined[p] {
					t.Errorf("partition %d differs", p)
				}
			}
			p := cs.Plan()
			G := int64(len(p.Groups))
			if want := int64(c.P) * (2 + G); combinedGETs != want {
				t.Errorf("combined readers made %d GETs, want %d (G = %d per partition)", combinedGETs, want, G)
			}
			pr := p.Predict
			puts := putClass(spent)
			t.Logf("%d x %d, G=%d J=%d: readers %d GETs direct (predicted %d), %d combined (predicted %d); combining %d GETs (predicted %d) and %d PUT-class (predicted %d); pays: %v",
				c.W, c.P, G, len(p.Buckets), directGETs, pr.Direct.GET, combinedGETs, pr.Combined.GET, spent["GetObject"], pr.Combine.GET, puts, pr.Combine.PUT, pr.Pays)
			for _, x := range []struct {
				what      string
				got, want int64
			}{{"direct GETs", directGETs, pr.Direct.GET}, {"combined GETs", combinedGETs, pr.Combined.GET},
				{"combining GETs", spent["GetObject"], pr.Combine.GET}, {"combining PUTs", puts, pr.Combine.PUT}} {
				if !within(x.got, x.want) {
					t.Errorf("%s: %d measured, %d predicted: more than 10%% apart", x.what, x.got, x.want)
				}
			}
		})
	}
}

// TestCombineGC: gc of a combined stage keeps its combined objects and
// index (keys it does not know are never its to delete) and the first
// level's data (its worker manifests still name it), and deletes the
// first level's index, which no stage manifest names any more, once it
// is older than --older-than: the grace period of readers that opened
// the stage before the combined seal.
func TestCombineGC(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	writeStage(t, e, "q", 4, 4, 10, 1000)
	direct, _ := readEach(t, e, "q", 4)
	first, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), "q", 0)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 2, Buckets: 2})
	if err != nil {
		t.Fatal(err)
	}
	// A plan that will lose, opened before the seal: its task's object
	// and manifest are left when the stage is combined by the other.
	lost, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 1, Buckets: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	lt, err := lost.RunTask(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// An attempt of the winning plan killed after its upload completed.
	stray := e.c.Layout().ObjectKey("q", 0, e.c.Layout().TaskDataKey("q", 0, cs.Plan().ID, 1, "00000000000000ff"))
	if err := e.st.Put(ctx, stray, []byte("killed attempt"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// An upload of the winning plan that was never finished.
	if _, err := e.st.CreateMultipart(ctx, e.c.Layout().ObjectKey("q", 0, e.c.Layout().TaskDataKey("q", 0, cs.Plan().ID, 2, "00000000000000ee"))); err != nil {
		t.Fatal(err)
	}
	objs, _, err := e.st.List(ctx, e.c.Layout().StagePrefix("q", 0), "")
	if err != nil {
		t.Fatal(err)
	}
	p, err := gc.NewPlan(ctx, e.st, e.c.Layout(), gc.Options{OlderThan: 0, ResultsRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Apply(ctx, e.st); err != nil {
		t.Fatal(err)
	}
	left, _, err := e.st.List(ctx, e.c.Layout().StagePrefix("q", 0), "")
	if err != nil {
		t.Fatal(err)
	}
	index := e.c.Layout().ObjectKey("q", 0, first.Index.Key)
	var gone []string
	kept := map[string]bool{}
	for _, o := range left {
		kept[o.Key] = true
	}
	for _, o := range objs {
		if !kept[o.Key] {
			gone = append(gone, o.Key)
		}
	}
	wantGone := []string{
		e.c.Layout().ObjectKey("q", 0, manifest.TaskManifestName(lost.Plan().ID, 0)),
		e.c.Layout().ObjectKey("q", 0, lt.Manifest.Objects[0].Key),
		stray, index,
	}
	slices.Sort(wantGone)
	slices.Sort(gone)
	if fmt.Sprint(gone) != fmt.Sprint(wantGone) {
		t.Errorf("gc deleted %v, want the first level's index, the losing plan's task and the killed attempt's object: %v", gone, wantGone)
	}
	if ups, err := e.st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Errorf("gc left uploads %v %v", ups, err)
	}
	combined, _ := readEach(t, e, "q", 4)
	for i := range direct {
		if direct[i] != combined[i] {
			t.Errorf("partition %d differs after gc", i)
		}
	}

	// With a grace period for the first level: kept while the combined
	// seal is younger, removed (worker manifests and data) once older.
	for _, c := range []struct {
		after time.Duration
		gone  int
	}{{30 * time.Minute, 0}, {2 * time.Hour, 8}} {
		now := time.Now().Add(c.after)
		p, err := gc.NewPlan(ctx, e.st, e.c.Layout(), gc.Options{OlderThan: 0, ResultsRetention: time.Hour, CombinedGrace: time.Hour, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.Apply(ctx, e.st)
		if err != nil {
			t.Fatal(err)
		}
		if int(r.Totals.ObjectsDeleted) != c.gone {
			t.Errorf("gc %v after the combined seal deleted %d objects, want %d: %+v", c.after, r.Totals.ObjectsDeleted, c.gone, r.Orphans)
		}
	}
	left, _, err = e.st.List(ctx, e.c.Layout().StagePrefix("q", 0), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range left {
		rel := strings.TrimPrefix(o.Key, e.c.Layout().StagePrefix("q", 0))
		if !strings.HasPrefix(rel, manifest.PlanDir(cs.Plan().ID)) && rel != combine.CombinedName && rel != "manifest.json" {
			t.Errorf("%s is left after the first level's grace", rel)
		}
	}
	again, _ := readEach(t, e, "q", 4)
	for i := range direct {
		if direct[i] != again[i] {
			t.Errorf("partition %d differs once the first level is gone", i)
		}
	}
}

// TestCombineRuns: writers with spill off store one run per flush, so a
// bucket's frames lie in several runs of each object: a task makes one
// GET per run (GapBytes -1: runs apart are never joined), and the
// combined level still reads back the same rows in the same order, one
// GET per task for a partition where the first level needs one per run.
func TestCombineRuns(t *testing.T) {
	ep := testenv.Embedded(t)
	st, counter := ep.NewStore(t)
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket = ep.Bucket
	cfg.Write.Spill = "off"
	cfg.Write.CoalesceBudget = 256 * durashuffle.KiB
	cfg.Write.FrameTargetBytes = 64 * durashuffle.KiB
	c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
	t.Cleanup(c.Close)
	e := &env{c: c, st: st, counter: counter}
	ctx := context.Background()
	const W, P, rounds = 2, 4, 3
	for w := range W {
		wr, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Stage: 0, Worker: fmt.Sprint(w), Partitions: P})
		if err != nil {
			t.Fatal(err)
		}
		// Each round is about 320 KiB: more than the coalesce budget, so
		// every round flushes a run of every partition.
		for r := range rounds {
			for p := range P {
				rec := batch(int64(((r*W+w)*P+p)*80), 80, 1000)
				err := wr.Write(p, rec)
				rec.Release()
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := wr.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Seal(ctx, "q", 0, W); err != nil {
		t.Fatal(err)
	}
	direct, directGETs := readEach(t, e, "q", P)
	s, err := c.Combine(ctx, "q", 0, combine.Options{Groups: 1, Buckets: 2, GapBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	// The runs of bucket 0 in each object: the first level's frames of
	// its partitions, joined where adjacent.
	// The stage manifest stays the first level's: the combined level's
	// manifest is an object of its own.
	m, err := manifest.LoadStageManifest(ctx, e.st, e.c.Layout(), "q", 0)
	if err != nil {
		t.Fatal(err)
	}
	b0 := s.Plan().Buckets[0]
	var parts []int
	for p := b0.Lo; p < b0.Hi; p++ {
		parts = append(parts, p)
	}
	fs, err := m.Frames(ctx, st, c.Layout(), parts)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for w := range W {
		var end int64 = -1
		var offs []manifest.Frame
		for _, f := range fs {
			if f.Worker == w {
				offs = append(offs, f)
			}
		}
		slices.SortFunc(offs, func(a, b manifest.Frame) int { return int(a.Offset - b.Offset) })
		for _, f := range offs {
			if f.Offset != end {
				runs++
			}
			end = f.Offset + f.Length
		}
	}
	if runs < W*rounds {
		t.Fatalf("bucket 0 lies in %d runs of %d objects, want at least %d: the writers did not flush a run per round", runs, W, W*rounds)
	}
	before := counter.Requests()
	if _, err := s.RunTask(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if d := reqs.Diff(counter.Requests(), before); d["GetObject"] != int64(2+runs) {
		t.Errorf("task 0 made %d GETs, want 2 + one per run (%d)", d["GetObject"], runs)
	}
	if _, err := s.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	combined, combinedGETs := readEach(t, e, "q", P)
	for p := range P {
		if direct[p] != combined[p] {
			t.Errorf("partition %d differs", p)
		}
	}
	if combinedGETs != P*3 || directGETs <= int64(P*(2+W)) {
		t.Errorf("readers made %d GETs combined (want %d), %d as written (want more than %d: a GET per run)", combinedGETs, P*3, directGETs, P*(2+W))
	}
	t.Logf("%d runs of bucket 0; readers %d GETs as written, %d combined", runs, directGETs, combinedGETs)
}

// TestCombineRefusals: an unsealed stage is not combined; a plan that
// lost to another plan's seal is refused naming both; a stage combined
// before is opened combined, with no plan, and its tasks are no-ops.
func TestCombineRefusals(t *testing.T) {
	e := newEnv(t, testenv.Embedded(t))
	ctx := context.Background()
	wr, err := e.c.NewWriter(ctx, durashuffle.WriterOptions{Query: "u", Stage: 0, Worker: "0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wr.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Combine(ctx, "u", 0, combine.Options{}); !errors.Is(err, combine.ErrNotSealed) || !strings.Contains(err.Error(), "seal the stage first") {
		t.Fatalf("combine of an unsealed stage: %v", err)
	}

	writeStage(t, e, "q", 4, 4, 10, 1000)
	a, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 2, Buckets: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 1, Buckets: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RunAll(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RunAll(ctx, 1); err != nil {
		t.Fatal(err)
	}
	_, err = b.Seal(ctx)
	want := fmt.Sprintf("combined by plan %s, not %s", a.Plan().ID, b.Plan().ID)
	if !errors.Is(err, combine.ErrAlreadyCombined) || !strings.Contains(err.Error(), want) {
		t.Fatalf("seal of a plan that lost: %v, want %q", err, want)
	}
	c, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 1, Buckets: 1})
	if err != nil || c.Combined() == nil || c.Plan() != nil {
		t.Fatalf("reopen of a combined stage: %v", err)
	}
	before := e.counter.Requests()
	tk, err := c.RunTask(ctx, 3)
	if err != nil || tk.Wrote || tk.Manifest.Worker != "c3" {
		t.Fatalf("task 3 of a combined stage: %v", err)
	}
	if _, err := c.RunTask(ctx, 4); err == nil || !strings.Contains(err.Error(), "task 4 outside the combined level's 4 tasks") {
		t.Fatalf("task 4 of 4: %v", err)
	}
	if d := reqs.Diff(e.counter.Requests(), before); len(d) != 0 {
		t.Errorf("tasks of a combined stage made %v", d)
	}
}

// TestCombineSealAgain: the first level's seal run again after the stage
// was combined (an engine retrying its seal task) returns the combined
// level and writes nothing, also once gc has deleted the first level's
// worker manifests; a seal naming other workers is still ErrSealConflict,
// and readers keep reading the combined level.
func TestCombineSealAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const W, P = 4, 4
		writeStage(t, e, "q", W, P, 10, 1000)
		direct, _ := readEach(t, e, "q", P)
		cs, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 2, Buckets: 2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RunAll(ctx, 2); err != nil {
			t.Fatal(err)
		}
		sealed, err := cs.Seal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mkey := e.c.Layout().StageManifestKey("q", 0)
		want := getBytes(t, e, mkey)

		sealAgain := func(what string) {
			t.Helper()
			before := e.counter.Requests()
			m, err := e.c.Seal(ctx, "q", 0, W)
			if err != nil {
				t.Fatalf("%s: seal again after combining: %v", what, err)
			}
			if !combine.IsCombined(m) || m.Index.Key != sealed.Index.Key || len(m.Workers) != 4 || m.Totals.Rows != W*P*10 {
				t.Errorf("%s: seal again returned index %s, %d workers, %d rows; want the combined level (index %s, 4 tasks, %d rows)",
					what, m.Index.Key, len(m.Workers), m.Totals.Rows, sealed.Index.Key, W*P*10)
			}
			for op, n := range reqs.Diff(e.counter.Requests(), before) {
				if op != "GetObject" {
					t.Errorf("%s: seal again made %d %s, want GETs only", what, n, op)
				}
			}
			if got := getBytes(t, e, mkey); string(got) != string(want) {
				t.Errorf("%s: the stage manifest changed (%d bytes, was %d)", what, len(got), len(want))
			}
		}
		sealAgain("first level present")

		// Fewer workers, or a worker that committed after the seal, are
		// not the workers the stage was combined from.
		if _, err := e.c.Seal(ctx, "q", 0, W-1); !errors.Is(err, manifest.ErrSealConflict) || !strings.Contains(err.Error(), "combined from 4 workers") {
			t.Errorf("seal of %d workers: %v, want ErrSealConflict naming the 4 workers combined", W-1, err)
		}
		late, err := e.c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Stage: 0, Worker: fmt.Sprint(W), Partitions: P})
		if err != nil {
			t.Fatal(err)
		}
		rec := batch(1<<40, 3, 10)
		err = late.Write(0, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := late.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.Seal(ctx, "q", 0, W+1); !errors.Is(err, manifest.ErrSealConflict) {
			t.Errorf("seal of %d workers: %v, want ErrSealConflict", W+1, err)
		}

		// The first level's worker manifests gone (as gc --combined-grace
		// deletes them): the workers' IDs still match the record.
		for w := range W {
			if err := e.st.Delete(ctx, e.c.Layout().WorkerManifestKey("q", 0, fmt.Sprint(w))); err != nil {
				t.Fatal(err)
			}
		}
		sealAgain("worker manifests deleted")
		if _, err := e.c.Seal(ctx, "q", 0, W-1); !errors.Is(err, manifest.ErrMissingWorkers) {
			t.Errorf("seal of %d workers without manifests: %v, want ErrMissingWorkers", W-1, err)
		}

		combined, _ := readEach(t, e, "q", P)
		for i := range direct {
			if direct[i] != combined[i] {
				t.Errorf("partition %d: %d rows %x as written, %d rows %x after sealing again", i, direct[i].Rows, direct[i].Hash[:4], combined[i].Rows, combined[i].Hash[:4])
			}
		}
	})
}

func getBytes(t *testing.T, e *env, key string) []byte {
	t.Helper()
	body, err := e.st.GetRange(context.Background(), key, 0, -1)
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

// TestCombineThrottled: combine tasks and the combined seal against a
// store that answers 503 SlowDown to half of the requests: the client's
// retries carry every task and the seal to their commit, the combined
// level reads back the same rows and content, GETs and PUT-class
// requests both met SlowDowns, and nothing is left over: no unfinished upload,
// and under the plan's folder only the task manifests, the objects they
// name and the index the combined manifest names.
// throttledEnv is a client of backend b through a fault proxy (no
// faults until its spec is set), retrying SlowDown answers, with the
// store under it direct (e.st, no proxy).
func throttledEnv(t *testing.T, b testenv.Backend) (*env, *faultproxy.Proxy) {
	ep := b.Start(t)
	p, err := faultproxy.StartTLS(ep.URL, faultproxy.Spec{}, ep.ServerTLS(t), ep.Transport(t).TLSClientConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close fault proxy: %v", err)
		}
	})
	counter := new(store.Counter)
	o := ep.Options(counter)
	o.Endpoint = p.URL()
	raw, err := s3store.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket = ep.Bucket
	cfg.Write.ChunkSize = 5 * durashuffle.MiB
	cfg.Write.UploadConcurrency = 4
	cfg.Store.RetryMaxAttempts = 30 // at 1/2, 30 SlowDowns in a row: about 1e-9
	cfg.Store.RetryBaseDelay = durashuffle.Duration(5 * time.Millisecond)
	cfg.Store.RetryMaxDelay = durashuffle.Duration(100 * time.Millisecond)
	c := testenv.Client(t, cfg, durashuffle.WithStore(raw), durashuffle.WithCounter(counter))
	t.Cleanup(c.Close)
	direct, _ := ep.NewStore(t)
	return &env{c: c, st: direct, counter: counter}, p
}

func TestCombineThrottled(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e, p := throttledEnv(t, b)
			c, direct := e.c, e.st
			ctx := context.Background()

			// 4 workers x 4 partitions of 1 MiB each: two tasks of 8 MiB,
			// each a multipart upload of 5 MiB parts.
			const W, P = 4, 4
			writeStage(t, e, "q", W, P, 256, 4096)
			want, _ := readEach(t, e, "q", P)

			if err := p.SetSpec(faultproxy.Spec{SlowDown: 0.5, Seed: 7}); err != nil {
				t.Fatal(err)
			}
			before := p.Stats()
			cs, err := c.Combine(ctx, "q", 0, combine.Options{Groups: 1, Buckets: 2, PartBytes: 5 << 20})
			if err != nil {
				t.Fatal(err)
			}
			tasks, err := cs.RunAll(ctx, 2)
			if err != nil {
				t.Fatalf("combine tasks under SlowDown: %v", err)
			}
			for _, tk := range tasks {
				if !tk.Wrote || len(tk.Manifest.Objects) != 1 || tk.Manifest.Objects[0].Parts != 2 {
					t.Errorf("task %d: wrote %v, objects %+v; want one object of 2 parts written by this run", tk.N, tk.Wrote, tk.Manifest.Objects)
				}
			}
			m, err := cs.Seal(ctx)
			if err != nil {
				t.Fatalf("combined seal under SlowDown: %v", err)
			}
			after := p.Stats()
			injected := map[string]int64{}
			for k, n := range after.Injected {
				if k.Fault == faultproxy.FaultSlowDown {
					injected[k.Op] += n - before.Injected[k]
				}
			}
			t.Logf("SlowDown answers by operation: %v", injected)
			puts := injected["PutObject"] + injected["CreateMultipartUpload"] + injected["UploadPart"] + injected["CompleteMultipartUpload"]
			if injected["GetObject"] == 0 || puts == 0 {
				t.Errorf("SlowDown answers %v: none to GETs or none to PUT-class requests, the test proves nothing about them", injected)
			}

			if err := p.SetSpec(faultproxy.Spec{}); err != nil {
				t.Fatal(err)
			}
			got, _ := readEach(t, e, "q", P)
			for i := range want {
				if want[i] != got[i] {
					t.Errorf("partition %d: %d rows %x as written, %d rows %x combined under SlowDown", i, want[i].Rows, want[i].Hash[:4], got[i].Rows, got[i].Hash[:4])
				}
			}
			if ups, err := direct.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
				t.Errorf("unfinished uploads left: %v %v", ups, err)
			}
			wantKeys := []string{m.Index.Key}
			for n, w := range m.Workers {
				wantKeys = append(wantKeys, manifest.TaskManifestName(cs.Plan().ID, n), w.Objects[0].Key)
			}
			slices.Sort(wantKeys)
			gotKeys := planKeys(t, e, cs.Plan().ID)
			slices.Sort(gotKeys)
			if fmt.Sprint(gotKeys) != fmt.Sprint(wantKeys) {
				t.Errorf("the plan's folder holds %v, want %v", gotKeys, wantKeys)
			}
		})
	}
}

// countingScratch is a Scratch on a spill directory that records the
// sizes of the files made.
type countingScratch struct {
	d     *spill.Dir
	mu    sync.Mutex
	sizes []int64
}

func (c *countingScratch) Create(size int64, what string) (combine.ScratchFile, error) {
	c.mu.Lock()
	c.sizes = append(c.sizes, size)
	c.mu.Unlock()
	return c.d.CreateSized(size, what)
}

// TestCombineOnDisk: a task over MemoryBytes, given Scratch, lays its
// object out in a file of its size and uploads it from there in
// sections: the stage reads back the same rows and content, the object
// has the parts the plan sized, and the file is gone afterwards. A
// scratch without room fails the task naming the limit, and leaves no
// object, no upload and no file.
func TestCombineOnDisk(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		// One task of about 12 MiB: over a MemoryBytes of 1 MiB.
		writeStage(t, e, "q", 3, 2, 20, 100_000)
		before, _ := readEach(t, e, "q", 2)

		small, err := spill.Open(t.TempDir(), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer small.Close()
		s, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 1, Buckets: 1, MemoryBytes: 1 << 20, Scratch: &countingScratch{d: small}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.RunTask(ctx, 0)
		if !errors.Is(err, spill.ErrLimit) || !strings.Contains(err.Error(), "combine task 0") || !strings.Contains(err.Error(), "spill_bytes") {
			t.Fatalf("a task with no room on disk: %v, want ErrLimit naming the task and spill_bytes", err)
		}
		if keys := planKeys(t, e, s.Plan().ID); len(keys) != 0 {
			t.Errorf("a task with no room on disk left %v", keys)
		}

		d, err := spill.Open(t.TempDir(), 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		sc := &countingScratch{d: d}
		start := e.counter.Requests()
		s, err = e.c.Combine(ctx, "q", 0, combine.Options{Groups: 1, Buckets: 1, MemoryBytes: 1 << 20, Scratch: sc})
		if err != nil {
			t.Fatal(err)
		}
		tk, err := s.RunTask(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		obj := tk.Manifest.Objects[0]
		// 16 uploads would cut it in parts under 5 MiB: parts of 5 MiB.
		if want := int((obj.Size + 5<<20 - 1) / (5 << 20)); len(sc.sizes) != 1 || sc.sizes[0] != obj.Size || obj.Parts != want {
			t.Fatalf("files made %v for an object of %d bytes in %d parts; want one of its size, %d parts", sc.sizes, obj.Size, obj.Parts, want)
		}
		if files, _ := filepath.Glob(filepath.Join(d.Path(), "*")); d.Used() != 0 || len(files) > 1 {
			t.Errorf("after the task: %d bytes counted, files %v; want none but the lock", d.Used(), files)
		}
		if ups, err := e.st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
			t.Errorf("uploads left: %v %v", ups, err)
		}
		sealAsPredicted(t, e, s, start, before, "combining on disk")
	})
}

// TestRunAllDiskRoom: RunAll starts a task on disk only when the
// expected bytes of those running fit in ScratchBytes: two tasks of
// about 12 MiB, run two at a time on a spill directory of 18 MiB (the
// ScratchBytes given), run one after the other and both commit, where
// side by side one would find no room.
func TestRunAllDiskRoom(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		writeStage(t, e, "q", 3, 2, 40, 100_000)
		const room = 18 << 20
		d, err := spill.Open(t.TempDir(), room)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		sc := &countingScratch{d: d}
		s, err := e.c.Combine(ctx, "q", 0, combine.Options{Groups: 1, Buckets: 2, MemoryBytes: 1 << 20, Scratch: sc, ScratchBytes: room})
		if err != nil {
			t.Fatal(err)
		}
		for n, b := range s.Plan().TaskBytes {
			if b <= 10<<20 || 2*b <= room {
				t.Fatalf("task %d of %d bytes: want two tasks on disk that do not fit in %d bytes together", n, b, room)
			}
		}
		tasks, err := s.RunAll(ctx, 2)
		if err != nil {
			t.Fatalf("two tasks on disk in %d bytes of room: %v", room, err)
		}
		if len(tasks) != 2 || len(sc.sizes) != 2 {
			t.Fatalf("%d tasks committed, %d files made; want 2 and 2", len(tasks), len(sc.sizes))
		}
		if _, err := s.Seal(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
