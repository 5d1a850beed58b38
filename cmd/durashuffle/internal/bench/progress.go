package bench

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/store"
)

// Live progress of a child. A parent that wants to draw bars sets
// Runner.Watch; the Runner then hands each child the write end of a pipe
// (Job.ProgressFD) and the child writes a Sample there, one JSON line,
// every sampleEvery and once more when its job is done. A child without
// ProgressFD counts nothing and writes nothing, so results and runs
// without a watcher are unchanged.

// Sample is what a child has moved so far. Counters are cumulative; a
// contender reports the ones it has (transfermanager has no encoder, the
// sequential writer no upload pool).
type Sample struct {
	// Seconds since the child's data began to move (its first chunk
	// encoded or first data request sent); 0 before.
	Seconds float64 `json:"seconds"`
	// Encoded is the bytes the encoder handed to the upload pool
	// (durashuffle's writer, over the link or the null store).
	Encoded int64 `json:"encoded,omitempty"`
	// Sent is the bytes of data requests (parts and single puts, not
	// manifests) that the store acknowledged; Received the bytes read
	// from ranged GETs of data objects.
	Sent     int64 `json:"sent,omitempty"`
	Received int64 `json:"received,omitempty"`
	// InFlight is the data requests under way: parts, puts, ranged GETs
	// whose body is still being read.
	InFlight int64 `json:"in_flight,omitempty"`
	// Buffers is the chunk buffers the upload pool holds.
	Buffers int64 `json:"buffers,omitempty"`
	// Total is the bytes the job will move, when the child knows it
	// before it starts (transfermanager uploading files); 0 unknown.
	Total int64 `json:"total,omitempty"`
}

// Round places a job among its scenario's runs, for progress: round
// Round of Rounds, run Run of Runs over every contender and round, all
// 1-based. Name is the contender as the report names it.
type Round struct {
	Name          string
	Round, Rounds int
	Run, Runs     int
}

// Watcher follows the children a Runner starts, to draw live progress.
// Started and Finished are called on the goroutine calling Run, Progress
// on one reading the child, every Progress of a job before its Finished.
// Progress should return quickly: while it runs, the child's next sample
// waits (its work does not).
type Watcher interface {
	Started(j *Job)
	Progress(j *Job, s Sample)
	Finished(j *Job, r *Result) // r is nil if the child failed
}

// sampleEvery is how often a child reports.
const sampleEvery = 100 * time.Millisecond

// readSamples hands every Sample on r to rn.Watch until the child closes
// its end, then closes r. A line that does not decode ends the samples,
// not the run: the rest is drained so the child never blocks on the pipe.
func (rn *Runner) readSamples(j *Job, r *os.File) {
	defer r.Close()
	dec := json.NewDecoder(r)
	for {
		var s Sample
		if err := dec.Decode(&s); err != nil {
			io.Copy(io.Discard, r)
			return
		}
		rn.Watch.Progress(j, s)
	}
}

// liveMeter counts what a child moves, for its samples. Every method is
// cheap and safe for concurrent use.
type liveMeter struct {
	born      time.Time
	first     atomic.Int64 // when data began to move, in nanoseconds after born; 0 not yet
	chunkSize int64

	// From the upload pool (see encoded).
	cut, short, pooled atomic.Int64
	buffered           atomic.Int64 // bytes in chunk buffers now

	// From the store or the SDK's middleware.
	sent, received, inFlight atomic.Int64

	total atomic.Int64
}

// startReporting makes the child count and report on j.ProgressFD. The
// returned function writes the last sample and closes the descriptor.
func (j *Job) startReporting() (stop func()) {
	m := &liveMeter{born: time.Now(), chunkSize: int64(j.Config.Write.ChunkSize)}
	j.live = m
	f := os.NewFile(uintptr(j.ProgressFD), "progress")
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		enc := json.NewEncoder(f)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				enc.Encode(m.sample())
				return
			case <-t.C:
				if enc.Encode(m.sample()) != nil {
					return // the parent stopped listening
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		f.Close()
	}
}

func (m *liveMeter) sample() Sample {
	s := Sample{
		Encoded: m.encoded(), Sent: m.sent.Load(), Received: m.received.Load(), InFlight: m.inFlight.Load(),
		Total: m.total.Load(),
	}
	if m.chunkSize > 0 {
		s.Buffers = m.buffered.Load() / m.chunkSize
	}
	if f := m.first.Load(); f > 0 {
		s.Seconds = (time.Since(m.born) - time.Duration(f)).Seconds()
	}
	return s
}

// moving notes that data began to move, the first time it is called.
func (m *liveMeter) moving() {
	if m.first.Load() == 0 {
		m.first.CompareAndSwap(0, max(int64(time.Since(m.born)), 1))
	}
}

// encoded is the bytes handed to the pool: every chunk is chunkSize bytes
// except the last of each object, so chunks x chunkSize less what
// finished parts fell short by. Exact once every part is done; before,
// it may be ahead by what unfinished last parts will fall short by, and
// fall back when they finish.
func (m *liveMeter) encoded() int64 {
	return max(m.cut.Load()*m.chunkSize-m.short.Load(), m.pooled.Load())
}

// begin and end bracket one data request; end adds the bytes sent by a
// successful upload.
func (m *liveMeter) begin() {
	m.moving()
	m.inFlight.Add(1)
}

func (m *liveMeter) end(sent int64, err error) {
	m.inFlight.Add(-1)
	if err == nil {
		m.sent.Add(sent)
	}
}

// The durashuffle.Observer side.

func (m *liveMeter) Queued(delta int) {
	if delta > 0 {
		m.moving()
		m.cut.Add(int64(delta))
	}
}
func (m *liveMeter) Buffered(n int64)            { m.buffered.Store(n) }
func (m *liveMeter) PartDone(_, _ time.Duration) {}
func (m *liveMeter) Uploaded(n int64) {
	m.pooled.Add(n)
	if d := m.chunkSize - n; d > 0 {
		m.short.Add(d)
	}
}

// observer is the upload pool observer of a job: its live meter when the
// parent asked for progress, else nil.
func (j *Job) observer() durashuffle.Observer {
	if j.live == nil {
		return nil
	}
	return j.live
}

// metered is st counted by the job's live meter, or st itself when the
// parent did not ask for progress.
func (j *Job) metered(st store.Store) store.Store {
	if j.live == nil {
		return st
	}
	return meteredStore{st, j.live}
}

// meteredStore counts a store's data requests: parts and single puts and
// ranged GETs of data objects, not of manifests (conditional puts,
// .json) or stage indexes.
type meteredStore struct {
	store.Store
	m *liveMeter
}

func (s meteredStore) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	if o.IfNoneMatch || !isData(key) {
		return s.Store.Put(ctx, key, body, o)
	}
	s.m.begin()
	err := s.Store.Put(ctx, key, body, o)
	s.m.end(int64(len(body)), err)
	return err
}

func (s meteredStore) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	if !isData(key) {
		return s.Store.UploadPart(ctx, key, id, n, body)
	}
	s.m.begin()
	pt, err := s.Store.UploadPart(ctx, key, id, n, body)
	s.m.end(body.Size(), err)
	return pt, err
}

func (s meteredStore) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if !isData(key) {
		return s.Store.GetRange(ctx, key, off, length)
	}
	s.m.begin()
	rc, err := s.Store.GetRange(ctx, key, off, length)
	if err != nil {
		s.m.end(0, err)
		return nil, err
	}
	return &meteredBody{ReadCloser: rc, m: s.m}, nil
}

// isData: anything but a manifest (.json) or a stage index.
func isData(key string) bool {
	return !strings.HasSuffix(key, ".json") && !(strings.Contains(key, "/index-") && strings.HasSuffix(key, ".bin"))
}

// meteredBody counts the bytes read from a GET; the request is in flight
// until the body ends or is closed. Not safe for concurrent use, as no
// response body is.
type meteredBody struct {
	io.ReadCloser
	m    *liveMeter
	done bool
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.m.received.Add(int64(n))
	if err != nil {
		b.finish()
	}
	return n, err
}

func (b *meteredBody) Close() error {
	b.finish()
	return b.ReadCloser.Close()
}

func (b *meteredBody) finish() {
	if !b.done {
		b.done = true
		b.m.end(0, nil)
	}
}

// Unwrap implements store.Unwrapper.
func (s meteredStore) Unwrap() store.Store { return s.Store }

// StreamsParts passes on whether the store below streams parts, which
// UploadPart meters like any other.
func (s meteredStore) StreamsParts() bool { return store.StreamsParts(s.Store) }
