package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/reqs"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// openStore is the raw store of a job: the configured store over the
// link, or the null store. The transport, when there is one, is the
// caller's to close.
func openStore(ctx context.Context, j *Job) (store.Store, *store.Counter, *http.Transport, error) {
	counter := &store.Counter{}
	if j.NullStore {
		return &nullStore{counter: counter}, counter, nil, nil
	}
	hc, tr, err := j.httpClient()
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := openKind(ctx, j.Config, j.Endpoint, j.Bucket, j.Embedded, hc, counter)
	if err != nil {
		return nil, nil, nil, err
	}
	return j.metered(st), counter, tr, nil
}

func closeIdle(tr *http.Transport) {
	if tr != nil {
		tr.CloseIdleConnections()
	}
}

// prepareInput builds the input pool before the clock starts and returns
// its size; with fresh input it returns what the generators will hold
// (see freshInputBytes).
func prepareInput(j *Job) (int64, error) {
	if j.Data.Input == InputFresh {
		return freshInputBytes(j.Data)
	}
	p, err := getPool(j.Data.Seed, j.Data.Partitions, j.Data.PoolRows)
	if err != nil {
		return 0, err
	}
	p.piecesOf(int64(max(1, j.Data.WriteRows)))
	return p.size, nil
}

// writeDurashuffle is durashuffle's write path: Data.Workers writers on
// one client (one upload pool), each fed by Data.Producers goroutines,
// each committing its manifest; then, untimed, the stage is sealed.
func writeDurashuffle(ctx context.Context, j *Job) (*Result, error) {
	raw, counter, tr, err := openStore(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	return writeWith(ctx, j, raw, counter)
}

func writeWith(ctx context.Context, j *Job, raw store.Store, counter *store.Counter) (*Result, error) {
	clock := &dataClock{}
	client, err := durashuffle.Open(ctx, j.Config, durashuffle.WithStore(clockedStore{raw, clock}), durashuffle.WithCounter(counter), durashuffle.WithObserver(j.observer()))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	res := &Result{Name: j.Name}
	if res.InputBytes, err = prepareInput(j); err != nil {
		return nil, err
	}
	// The commit guard's one probe is a per-client cost, like dialling:
	// paid before the clock starts, so the requests below are the write's.
	if err := client.CheckCommitGuard(ctx); err != nil {
		return nil, err
	}
	workers := max(1, j.Data.Workers)
	manifests := make([]*manifest.Worker, workers)
	before := counter.Requests()
	start := startClock()
	clock.start = start
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			wr, err := client.NewWriter(gctx, durashuffle.WriterOptions{
				Query: j.Query, Stage: 0, Worker: strconv.Itoa(w), Partitions: j.Data.Partitions, Schema: demo.Schema(),
			})
			if err != nil {
				return err
			}
			if _, err := feed(gctx, j.Data, w, wr.Write); err != nil {
				return errorsJoin(err, wr.Abort())
			}
			clock.inputDone()
			m, err := wr.Commit(gctx)
			if err != nil {
				return fmt.Errorf("worker %d: %w", w, err)
			}
			manifests[w] = m
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	elapsed := stopClock(start)
	res.Requests = reqs.Diff(counter.Requests(), before)
	for _, m := range manifests {
		t := m.Sum()
		res.StoredBytes += t.BytesStored
		res.LogicalBytes += t.BytesLogical
		res.Rows += t.Rows
		res.Frames += t.Frames
		res.Objects += t.Objects
		res.Runs += sortedRuns(m)
		for c, n := range m.Codecs {
			if res.Codecs == nil {
				res.Codecs = map[string]int{}
			}
			res.Codecs[c] += n
		}
		for _, o := range m.Objects {
			res.Keys = append(res.Keys, client.Layout().ObjectKey(j.Query, 0, o.Key))
		}
	}
	res.PeakBufferedChunks = client.Stats().PeakBuffered
	res.finish(elapsed)
	clock.fill(res)
	if !j.NullStore && j.Kind != "encode-files" {
		if _, err := client.Seal(ctx, j.Query, 0, workers); err != nil {
			return nil, fmt.Errorf("seal: %w", err)
		}
	}
	return res, nil
}

func errorsJoin(err, cleanup error) error {
	if cleanup != nil {
		return fmt.Errorf("%w (abort: %v)", err, cleanup)
	}
	return err
}

// encodeFiles writes the data set with durashuffle's own writer into a
// store that keeps data objects as local files: the already-encoded bytes
// that transfermanager uploads.
func encodeFiles(ctx context.Context, j *Job) (*Result, error) {
	if len(j.Files) != 1 {
		return nil, fmt.Errorf("encode-files wants one output directory, got %d", len(j.Files))
	}
	counter := &store.Counter{}
	fs := &fileStore{nullStore: nullStore{counter: counter}, dir: j.Files[0], chunk: int64(j.Config.Write.ChunkSize), files: map[string]*os.File{}}
	defer fs.closeAll()
	res, err := writeWith(ctx, j, fs, counter)
	if err != nil {
		return nil, err
	}
	if err := fs.closeAll(); err != nil {
		return nil, err
	}
	res.Keys = res.Keys[:0]
	for _, k := range fs.order {
		res.Keys = append(res.Keys, fs.path(k))
	}
	return res, nil
}

// fileStore keeps data objects (not manifests) as files under dir: part n
// lands at offset (n-1) x chunk.
type fileStore struct {
	nullStore
	dir   string
	chunk int64
	mu    sync.Mutex
	files map[string]*os.File
	order []string
}

func (s *fileStore) path(key string) string {
	return filepath.Join(s.dir, strings.ReplaceAll(key, "/", "_"))
}

func (s *fileStore) file(key string) (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.files[key]; ok {
		return f, nil
	}
	f, err := os.Create(s.path(key))
	if err != nil {
		return nil, err
	}
	s.files[key] = f
	s.order = append(s.order, key)
	return f, nil
}

func (s *fileStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	if o.IfNoneMatch || strings.HasSuffix(key, ".json") { // manifests and the commit guard's probe
		return s.nullStore.Put(ctx, key, body, o)
	}
	f, err := s.file(key)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(body, 0)
	return err
}

func (s *fileStore) CreateMultipart(ctx context.Context, key string) (string, error) {
	if _, err := s.file(key); err != nil {
		return "", err
	}
	return key, nil
}

func (s *fileStore) UploadPart(_ context.Context, key, _ string, n int32, body store.Body) (store.Part, error) {
	f, err := s.file(key)
	if err != nil {
		return store.Part{}, err
	}
	if _, err := io.Copy(io.NewOffsetWriter(f, int64(n-1)*s.chunk), body.Reader()); err != nil {
		return store.Part{}, err
	}
	return partOf(n, body), nil
}

func (s *fileStore) closeAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for k, f := range s.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
		delete(s.files, k)
	}
	return first
}

// writeSequential is the write path of Druid before apache/druid#16481
// (https://github.com/apache/druid/pull/16481): the same
// chunker and encoder, but each chunk is uploaded synchronously by the
// goroutine that filled it before the next chunk is built, one part in
// flight at a time.
func writeSequential(ctx context.Context, j *Job) (*Result, error) {
	st, counter, clock, done, err := writeStore(ctx, j)
	if err != nil {
		return nil, err
	}
	defer done()
	cfg := j.Config
	res := &Result{Name: j.Name}
	if res.InputBytes, err = prepareInput(j); err != nil {
		return nil, err
	}
	layout := manifest.Layout{Prefix: cfg.Store.Prefix}
	workers := max(1, j.Data.Workers)
	before := counter.Requests()
	start := startClock()
	clock.start = start
	g, gctx := errgroup.WithContext(ctx)
	results := make([]chunker.Result, workers)
	for w := range workers {
		g.Go(func() error {
			// Each bench job writes a query of its own: one attempt per worker.
			worker, attempt, write := strconv.Itoa(w), "bench", manifest.NewWriteID()
			sink := &syncSink{ctx: gctx, st: st, chunk: int64(cfg.Write.ChunkSize), checksum: cfg.Write.Checksum == "crc32c",
				key: func(obj int) string {
					return layout.ObjectKey(j.Query, 0, manifest.DataName(worker, attempt, write, obj))
				}}
			ch, err := chunker.New(gctx, chunker.Options{
				Schema: demo.Schema(), Partitions: j.Data.Partitions,
				FrameTargetBytes: int64(cfg.Write.FrameTargetBytes), CoalesceBudget: int64(cfg.Write.CoalesceBudget),
				Encoders: cfg.Encoders(), Compression: cfg.Write.Compression,
				MaxObjectSize: int64(cfg.Write.MaxObjectSize),
			}, sink)
			if err != nil {
				return err
			}
			if _, err := feed(gctx, j.Data, w, ch.Write); err != nil {
				ch.Abort(err)
				return err
			}
			clock.inputDone()
			r, err := ch.Close()
			if err != nil {
				return err
			}
			results[w] = r
			m := &manifest.Worker{Query: j.Query, Stage: 0, Worker: worker, Attempt: attempt,
				Compression: cfg.Write.Compression, Partitions: j.Data.Partitions, ChunkSize: int64(cfg.Write.ChunkSize),
				WriterVersion: "durashuffle bench (sequential uploads)", WrittenAt: time.Now().UTC()}
			if m.Schema, err = frame.EncodeSchema(demo.Schema()); err != nil {
				return err
			}
			for i, o := range r.Objects {
				m.Objects = append(m.Objects, manifest.Object{Key: manifest.DataName(worker, attempt, write, i), Size: o.Size, Parts: sink.count[i], CRC32C: o.CRC32C})
			}
			for _, f := range r.Frames {
				m.Frames = append(m.Frames, manifest.Frame{Partition: f.Partition, Object: f.Object, Offset: f.Offset, Length: f.Length, Rows: f.Rows, Bytes: f.Bytes, CRC32C: f.CRC32C})
			}
			_, err = manifest.Commit(gctx, st, layout, m)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	elapsed := stopClock(start)
	res.Requests = reqs.Diff(counter.Requests(), before)
	for _, r := range results {
		res.LogicalBytes += r.Bytes
		res.Rows += r.Rows
		res.Frames += len(r.Frames)
		res.Objects += len(r.Objects)
		for _, o := range r.Objects {
			res.StoredBytes += o.Size
		}
	}
	res.PeakBufferedChunks = 1
	res.finish(elapsed)
	clock.fill(res)
	return res, nil
}

// syncSink uploads every chunk on the chunker's appending goroutine, so
// the chunker cannot build the next chunk until the part is stored.
type syncSink struct {
	ctx      context.Context
	st       store.Store
	chunk    int64
	checksum bool
	key      func(obj int) string
	free     [][]byte
	uploads  map[int]string
	parts    map[int][]store.Part
	count    []int // parts per object
}

// Create starts the next object, cut into chunks as the pool cuts one.
func (s *syncSink) Create(int64, bool, func()) (chunker.Object, error) {
	s.count = append(s.count, 0)
	return &syncObject{s: s, obj: len(s.count) - 1}, nil
}

// Limit is what chunks of the chunk size hold; the sink takes no sections.
func (s *syncSink) Limit(onDisk bool) int64 {
	if onDisk {
		return 0
	}
	return s.chunk * store.MaxParts
}

// syncObject is an object of a syncSink: each chunk is stored once full
// and more bytes follow, on the writing goroutine.
type syncObject struct {
	s   *syncSink
	obj int
	cur []byte
}

func (o *syncObject) Write(p []byte) error {
	for len(p) > 0 {
		if int64(len(o.cur)) == o.s.chunk {
			if err := o.emit(false); err != nil {
				return err
			}
		}
		if o.cur == nil {
			o.cur, _ = o.s.Acquire(o.s.ctx)
		}
		n := min(int64(len(p)), o.s.chunk-int64(len(o.cur)))
		o.cur = append(o.cur, p[:n]...)
		p = p[n:]
	}
	return nil
}

func (o *syncObject) emit(last bool) error {
	o.s.count[o.obj]++
	buf := o.cur
	o.cur = nil
	return o.s.Emit(o.obj, int32(o.s.count[o.obj]), buf, last)
}

func (o *syncObject) WriteSection(chunker.Section) error {
	return fmt.Errorf("object %d: the sequential bench takes no sections", o.obj)
}

func (o *syncObject) Finish() error { return o.emit(true) }

func (o *syncObject) Abort() {
	if o.cur != nil {
		o.s.Release(o.cur)
		o.cur = nil
	}
}

func (s *syncSink) Acquire(context.Context) ([]byte, error) {
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		return b[:0], nil
	}
	return make([]byte, 0, s.chunk), nil
}

func (s *syncSink) Release(b []byte) { s.free = append(s.free, b) }

func (s *syncSink) Emit(obj int, part int32, buf []byte, last bool) error {
	defer s.Release(buf)
	key := s.key(obj)
	var crc uint32
	var sum *uint32
	if s.checksum {
		crc = store.CRC32C(buf)
		sum = &crc
	}
	if part == 1 && last {
		return s.st.Put(s.ctx, key, buf, store.PutOptions{CRC32C: sum})
	}
	if s.uploads == nil {
		s.uploads, s.parts = map[int]string{}, map[int][]store.Part{}
	}
	id, ok := s.uploads[obj]
	if !ok {
		var err error
		if id, err = s.st.CreateMultipart(s.ctx, key); err != nil {
			return err
		}
		s.uploads[obj] = id
	}
	body := store.BytesBody(buf)
	if sum != nil {
		body = body.WithCRC32C(*sum)
	}
	pt, err := s.st.UploadPart(s.ctx, key, id, part, body)
	if err != nil {
		return err
	}
	s.parts[obj] = append(s.parts[obj], pt)
	if last {
		return s.st.CompleteMultipart(s.ctx, key, id, s.parts[obj])
	}
	return nil
}
