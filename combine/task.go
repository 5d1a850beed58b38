package combine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/uploader"
)

// errCommitUnknown: a task manifest's put may have stored it, and it
// could not be read back: the attempt's object must stay.
var errCommitUnknown = errors.New("commit outcome unknown")

// writerVersion is the writer_version of a task manifest.
const writerVersion = "durashuffle-combine"

// Task is a committed task: its manifest (a worker of the combined
// level) and whether this call wrote it.
type Task struct {
	N        int
	Group    int
	Bucket   int
	Manifest *manifest.Worker
	// Wrote is true when this call committed the task; false when it
	// found it committed (a rerun, or a concurrent attempt that won).
	Wrote bool
}

// run is one fetch of a writer object: bytes [Offset, Offset+Length) of
// Key, holding frames.
type run struct {
	worker int // index into the level's workers
	key    string
	off    int64
	n      int64
	frames []int // indexes into the task's frame list, by offset
}

// RunTask runs task n of the plan: for each writer object of its group,
// one ranged GET per run of its bucket's frames (one when the object is
// a single sorted run), every frame checked against its CRC32C, then the
// frames copied as they are, in (partition, writer) order, into one
// combined object, and the task manifest committed with If-None-Match.
//
// A task that is already committed (a rerun, or another attempt that
// won the race) costs one GET and returns the committed task; an attempt
// that loses the race deletes its own object. A frame whose bytes do not
// match its checksum fails the task with a *reader.FrameError naming the
// writer object and the frame, before anything is written. A failure or
// a cancelled ctx after the upload began aborts the upload or deletes
// the object (on a context detached from ctx), so that nothing of the
// attempt stays visible; only when the manifest's put was sent and its
// outcome is unknown does the object stay, for the put may name it.
func (s *Stage) RunTask(ctx context.Context, n int) (*Task, error) {
	if s.combined != nil {
		return s.committedTask(n)
	}
	p := s.plan
	if n < 0 || n >= p.Tasks() {
		return nil, fmt.Errorf("%w: combine %s stage %d: task %d outside the plan's %d tasks [0, %d)", ErrInvalidPlan, s.query, s.stage, n, p.Tasks(), p.Tasks())
	}
	g, j := p.Task(n)
	t := &Task{N: n, Group: g, Bucket: j}
	what := fmt.Sprintf("combine task %d (group %d, bucket %d) of %s stage %d", n, g, j, s.query, s.stage)
	mkey := s.l.ObjectKey(s.query, s.stage, manifest.TaskManifestName(p.ID, n))
	if w, err := s.loadTask(ctx, mkey); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	} else if w != nil {
		t.Manifest = w
		s.taskDone(n)
		return t, nil
	}

	// The level the task reads: the sealed first level and the group's
	// range of its workers, or, while the map stage runs, the group's
	// committed worker manifests (their frames in memory).
	level, grp, group := s.level1, p.Groups[g], ""
	if s.overlap != nil {
		rec, ws, err := s.members(ctx, g)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		level, grp, group = s.groupLevel(ws), Range{0, len(ws)}, rec.digest()
	}
	// The bucket's frames, in delivery order (partition, worker, write
	// order), of the group's workers.
	b := p.Buckets[j]
	parts := make([]int, 0, b.Len())
	for q := b.Lo; q < b.Hi; q++ {
		parts = append(parts, q)
	}
	all, err := level.Frames(ctx, s.st, s.l, parts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	frames := all[:0:0]
	for _, f := range all {
		if f.Worker >= grp.Lo && f.Worker < grp.Hi {
			frames = append(frames, f)
		}
	}
	runs := planRuns(frames, func(f manifest.Frame) string {
		return s.l.ObjectKey(s.query, s.stage, level.Workers[f.Worker].Objects[f.Object].Key)
	}, p.opts.GapBytes)
	// The combined object is the frames in delivery order: each frame's
	// place in it is known before any arrives, so the GETs read straight
	// into it, in memory or in a file of its size (a task over
	// MemoryBytes, given Scratch), and its parts are slices or sections
	// of it. The task holds its bytes once.
	at := make([]int64, len(frames))
	var size int64
	for i, f := range frames {
		at[i] = size
		size += f.Length
	}
	if size > p.opts.TaskCapBytes {
		// Only an overlapped plan, whose buckets come from an estimate,
		// can meet more than it planned: partitions more skewed than
		// expected.
		return nil, fmt.Errorf("%s: %d bytes in %d frames, more than the task cap of %d bytes (TaskCapBytes): the stage's partitions are more skewed than the plan's estimate; combine after the seal, whose plan sizes tasks from the stage, or raise the cap",
			what, size, len(frames), p.opts.TaskCapBytes)
	}
	dst := &taskBytes{}
	if p.onDisk(size) {
		file, err := p.opts.Scratch.Create(size, what)
		if err != nil {
			return nil, err
		}
		defer file.Remove() // after the upload's Discard, deferred below
		dst.file = file
	} else {
		dst.mem = make([]byte, size)
	}
	// The object's upload runs beside the GETs: each part goes as soon
	// as every byte of it has arrived and passed its frame's CRC32C.
	write := manifest.NewWriteID()
	partBytes := p.partBytes(size)
	rel := s.l.TaskDataKey(s.query, s.stage, p.ID, n, write)
	var up *uploader.Object
	var fill *filling
	kept := false
	if len(frames) > 0 {
		// The upload's own context: a task that fails stops the parts in
		// flight at once, rather than send them to be aborted.
		uctx, ucancel := context.WithCancelCause(ctx)
		defer ucancel(nil)
		up = uploader.NewObject(uctx, s.st, s.l.ObjectKey(s.query, s.stage, rel),
			uploader.ObjectOptions{PartBytes: partBytes, Inflight: p.opts.Uploads, SizeHint: size})
		hand, err := dst.handTo(up, size)
		if err != nil {
			_ = up.Discard(s.st)
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		fill = newFilling(what, size, partBytes, hand)
		// Unless kept, what the task wrote goes (a cancelled task too):
		// no part is handed over or sent after the failure, and the
		// upload is aborted or the object deleted.
		defer func() {
			if !kept {
				ucancel(errTaskEnded)
				fill.abandon()
				_ = up.Discard(s.st)
			}
		}()
	}
	codecs := make([]byte, len(frames))
	if err := s.fetch(ctx, what, level, runs, frames, at, dst, codecs, fill); err != nil {
		return nil, err
	}

	w := &manifest.Worker{FormatVersion: manifest.FormatVersion, Kind: manifest.KindWorker,
		Query: s.query, Stage: s.stage, Worker: p.taskID(n), Attempt: write,
		Schema: level.Schema, Partitions: level.Partitions, Results: level.Results,
		Compression: compressionOf(level), ChunkSize: partBytes,
		WriterVersion: writerVersion, WrittenAt: time.Now().UTC(),
		Encryption: sealedBy(level, grp.Lo, grp.Hi), GroupSHA256: group}
	if len(frames) > 0 {
		count := map[string]int{}
		for i, f := range frames {
			count[codecName(codecs[i])]++
			nf := f
			nf.Worker, nf.Object, nf.Offset = 0, 0, at[i]
			w.Frames = append(w.Frames, nf)
		}
		if err := fill.stop(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		res, err := up.Complete(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		w.Objects = []manifest.Object{{Key: rel, Size: up.Size(), Parts: res.Parts, CRC32C: up.CRC32C()}}
		w.Codecs = count
	}
	w.Totals = w.Sum()
	if err := w.Check(mkey); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	enc, err := w.Encode()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	won, err := s.commitTask(ctx, mkey, enc, w)
	if errors.Is(err, errCommitUnknown) {
		kept = true // the manifest may name the object; gc cannot tell
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if won == w {
		t.Wrote = true
		kept = true
	}
	t.Manifest = won
	s.taskDone(n)
	return t, nil
}

// committedTask answers a task of a stage already combined.
func (s *Stage) committedTask(n int) (*Task, error) {
	ws := s.combined.Workers
	if n < 0 || n >= len(ws) {
		return nil, fmt.Errorf("%w: combine %s stage %d: task %d outside the combined level's %d tasks (plan %s)", ErrInvalidPlan, s.query, s.stage, n, len(ws), combinedPlan(s.combined))
	}
	w := ws[n]
	return &Task{N: n, Manifest: &w}, nil
}

// loadTask GETs a task manifest; nil when absent.
func (s *Stage) loadTask(ctx context.Context, key string) (*manifest.Worker, error) {
	b, err := readAll(ctx, s.st, key, manifest.MaxManifestBytes)
	if store.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return manifest.DecodeWorker(key, b)
}

// commitTask puts the task manifest with If-None-Match: * and returns
// the manifest that stands: w, or the one another attempt committed
// first. When the put's outcome is unknown (it failed in a way that may
// have stored it), the manifest is read back to learn it.
func (s *Stage) commitTask(ctx context.Context, key string, enc []byte, w *manifest.Worker) (*manifest.Worker, error) {
	if err := ctx.Err(); err != nil {
		// Never sent: the attempt's object can go.
		return nil, fmt.Errorf("commit %s: %w", key, context.Cause(ctx))
	}
	perr := s.st.Put(ctx, key, enc, store.PutOptions{IfNoneMatch: true, ContentType: "application/octet-stream"})
	if perr == nil {
		return w, nil
	}
	taken := errors.Is(perr, store.ErrPreconditionFailed)
	if !taken && !store.IsTransient(perr) && ctx.Err() == nil {
		return nil, fmt.Errorf("commit %s: %w", key, perr)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	got, err := s.loadTask(rctx, key)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: commit %s: the put failed (%v), and reading it back failed: %w", errCommitUnknown, key, perr, err)
	case got == nil && !taken:
		// A put cut off (cancelled, or a transient failure) may still
		// land after the read-back: the object stays for it, and gc
		// removes both if it never does.
		return nil, fmt.Errorf("%w: commit %s: the put failed (%v), and its manifest is not there yet: it may still land", errCommitUnknown, key, perr)
	case got == nil:
		return nil, fmt.Errorf("commit %s: %w", key, perr)
	case got.Attempt == w.Attempt:
		return w, nil
	}
	return got, nil
}

// sealedBy is the encryption of a task of workers [lo, hi) of level:
// the first level's (its workers agree, or seal refused them), with the
// writers whose frames, copied sealed as they are, the task's object
// holds; nil when level is not encrypted.
func sealedBy(level *manifest.Stage, lo, hi int) *manifest.Encryption {
	e := level.Encrypted()
	if e == nil {
		return nil
	}
	c := *e
	c.Writers = nil
	for _, w := range level.Workers[lo:hi] {
		if len(w.Objects) > 0 {
			c.Writers = append(c.Writers, manifest.SealedBy{Write: manifest.WriteID(w.Objects[0].Key), Worker: w.Worker, Attempt: w.Attempt})
		}
	}
	return &c
}

// planRuns groups frames by writer object and cuts each object's frames
// into runs: neighbours at most gap bytes apart (gap < 0: adjacent only)
// share one GET. Runs are in (worker, object, offset) order.
func planRuns(frames []manifest.Frame, keyOf func(manifest.Frame) string, gap int64) []*run {
	idx := make([]int, len(frames))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		fa, fb := frames[a], frames[b]
		if fa.Worker != fb.Worker {
			return fa.Worker - fb.Worker
		}
		if fa.Object != fb.Object {
			return fa.Object - fb.Object
		}
		switch {
		case fa.Offset < fb.Offset:
			return -1
		case fa.Offset > fb.Offset:
			return 1
		}
		return a - b
	})
	var runs []*run
	for _, i := range idx {
		f := frames[i]
		if len(runs) > 0 {
			r := runs[len(runs)-1]
			last := frames[r.frames[len(r.frames)-1]]
			end := r.off + r.n
			if last.Worker == f.Worker && last.Object == f.Object && f.Offset >= last.Offset &&
				(f.Offset <= end || (gap >= 0 && f.Offset-end <= gap)) {
				r.n = max(end, f.Offset+f.Length) - r.off
				r.frames = append(r.frames, i)
				continue
			}
		}
		runs = append(runs, &run{worker: f.Worker, key: keyOf(f), off: f.Offset, n: f.Length, frames: []int{i}})
	}
	return runs
}

// fetch GETs every run, fetches at a time, reading each frame straight
// into its place in dst (frame i at at[i]), checking its CRC32C on the
// way and noting its codec byte in codecs[i]; the bytes between a run's
// frames are read and dropped.
func (s *Stage) fetch(ctx context.Context, what string, level *manifest.Stage, runs []*run, frames []manifest.Frame, at []int64, dst *taskBytes, codecs []byte, fill *filling) error {
	eg, gctx := errgroup.WithContext(ctx)
	eg.SetLimit(fetches)
	for _, r := range runs {
		if gctx.Err() != nil {
			break
		}
		eg.Go(func() (err error) {
			defer safe.Recover(&err, "fetch of %s bytes [%d, %d)", r.key, r.off, r.off+r.n)
			body, err := s.st.GetRange(gctx, r.key, r.off, r.n)
			if err != nil {
				return fmt.Errorf("%s: get %s bytes [%d, %d): %w", what, r.key, r.off, r.off+r.n, err)
			}
			defer body.Close()
			return readRun(what, level.Workers[r.worker].Worker, r, body, frames, at, dst, codecs, fill)
		})
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
	return nil
}

// readRun reads run r's frames from body, which starts at the run's
// first byte, into dst, and tells fill (if any) of each frame checked;
// worker names the run's writer in errors.
func readRun(what, worker string, r *run, body io.Reader, frames []manifest.Frame, at []int64, dst *taskBytes, codecs []byte, fill *filling) error {
	pos := r.off
	var buf []byte
	if dst.file != nil {
		buf = make([]byte, 256<<10)
	}
	for _, i := range r.frames {
		f := frames[i]
		fe := &reader.FrameError{Key: r.key, Offset: f.Offset, Length: f.Length, Partition: f.Partition, Worker: worker}
		if f.Offset < pos {
			fe.Err = fmt.Errorf("%w: the frame overlaps the one before it, which ends at %d", manifest.ErrCorrupt, pos)
			return fmt.Errorf("%s: writer object %s: %w", what, r.key, fe)
		}
		_, err := io.CopyN(io.Discard, body, f.Offset-pos)
		var crc uint32
		if err == nil {
			crc, codecs[i], err = dst.read(body, at[i], f.Length, buf)
		}
		var de diskError
		switch {
		case errors.As(err, &de):
			return fmt.Errorf("%s: %w", what, de.error)
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			fe.Err = reader.ErrTruncated
			return fmt.Errorf("%s: writer object %s: %w", what, r.key, fe)
		case err != nil:
			return fmt.Errorf("%s: get %s bytes [%d, %d): %w", what, r.key, r.off, r.off+r.n, err)
		}
		if crc != f.CRC32C {
			fe.Err = fmt.Errorf("%w: CRC32C %08x, the index says %08x", reader.ErrChecksum, crc, f.CRC32C)
			return fmt.Errorf("%s: writer object %s: %w", what, r.key, fe)
		}
		pos = f.Offset + f.Length
		if fill != nil {
			if err := fill.landed(at[i], f.Length); err != nil {
				return fmt.Errorf("%s: upload: %w", what, err)
			}
		}
	}
	return nil
}

// taskBytes is a task's combined object as it arrives: in memory, or in
// a Scratch file of its size.
type taskBytes struct {
	mem  []byte
	file ScratchFile
}

// diskError is a write to a task's file that failed: the disk's fault,
// not the GET's.
type diskError struct{ error }

// read reads the n bytes of a frame from r into the object at off, and
// returns their CRC32C and first byte (the frame's codec); buf is the
// caller's copy buffer for a file.
func (t *taskBytes) read(r io.Reader, off, n int64, buf []byte) (crc uint32, codec byte, err error) {
	if n <= 0 {
		return 0, 0, nil
	}
	if t.file == nil {
		b := t.mem[off : off+n]
		if _, err := io.ReadFull(r, b); err != nil {
			return 0, 0, err
		}
		return store.CRC32C(b), b[0], nil
	}
	for done := int64(0); done < n; {
		b := buf[:min(int64(len(buf)), n-done)]
		if _, err := io.ReadFull(r, b); err != nil {
			return 0, 0, err
		}
		if done == 0 {
			codec = b[0]
		}
		crc = store.UpdateCRC32C(crc, b)
		if _, err := t.file.WriteAt(b, off+done); err != nil {
			return 0, 0, diskError{err}
		}
		done += int64(len(b))
	}
	return crc, codec, nil
}

// handTo returns what hands the object's bytes [off, off+n) to up, in
// order: slices of the memory, without a copy, or sections of the file.
func (t *taskBytes) handTo(up *uploader.Object, size int64) (func(off, n int64) error, error) {
	if t.file == nil {
		return func(off, n int64) error { return up.WriteFrom(t.mem[off : off+n]) }, nil
	}
	sec, err := t.file.Section(0, size)
	if err != nil {
		return nil, err
	}
	return func(_, n int64) error { return up.WriteFile(sec, n) }, nil
}

// filling hands a task's object to its upload part by part as the GETs
// fill it, so that the upload runs beside them rather than after: a part
// goes once every byte of it has arrived and passed its frame's CRC32C
// (landed), parts in order, each run of consecutive ready parts in one
// hand-over. The hand-overs run on a goroutine of their own: a part
// from a file is read for its CRC32C first, and the GETs do not wait
// for that.
type filling struct {
	what       string // the task, in errors
	part, size int64
	hand       func(off, n int64) error

	mu        sync.Mutex
	left      []int64 // per part, bytes not yet landed
	next      int     // parts queued for hand-over
	err       error   // the first hand-over that failed
	abandoned bool    // the task failed: queued hand-overs are dropped

	queue   chan [2]int64 // [off, n) to hand over, in order
	stopped sync.Once
	done    chan struct{} // closed when the hand-overs end
}

// errTaskEnded cancels the upload of a task that failed or lost.
var errTaskEnded = errors.New("combine task ended without its object")

func newFilling(what string, size, partBytes int64, hand func(off, n int64) error) *filling {
	// The object's parts, as uploader.NewObject cuts them.
	part := max(min(partBytes, size), 1)
	left := make([]int64, max(1, ceilDiv64(size, part)))
	for i := range left {
		left[i] = min(part, size-int64(i)*part)
	}
	f := &filling{what: what, part: part, size: size, hand: hand, left: left,
		queue: make(chan [2]int64, len(left)), done: make(chan struct{})}
	go f.run()
	return f
}

func (f *filling) run() {
	defer close(f.done)
	for r := range f.queue {
		f.mu.Lock()
		skip := f.err != nil || f.abandoned
		f.mu.Unlock()
		if skip {
			continue
		}
		// A panic (a Scratch's reads are the caller's) fails the task,
		// as one on the task's own goroutine does.
		err := safe.Call(func() error { return f.hand(r[0], r[1]) }, "%s: hand-over of bytes [%d, %d) to the upload", f.what, r[0], r[0]+r[1])
		if err != nil {
			f.mu.Lock()
			f.err = err
			f.mu.Unlock()
		}
	}
}

// abandon stops the hand-overs of a task that failed: those queued are
// dropped, and it returns once the one under way (if any) is done.
func (f *filling) abandon() {
	f.mu.Lock()
	f.abandoned = true
	f.mu.Unlock()
	_ = f.stop()
}

// landed records that the object's bytes [off, off+n) arrived, and
// queues the parts it completes; it returns the failure of an earlier
// hand-over (the upload failed: the GETs can stop). Safe for concurrent
// use.
func (f *filling) landed(off, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for n > 0 {
		i := off / f.part
		k := min(n, (i+1)*f.part-off)
		f.left[i] -= k
		off, n = off+k, n-k
	}
	from := f.next
	for f.next < len(f.left) && f.left[f.next] == 0 {
		f.next++
	}
	if f.next > from && f.err == nil {
		lo := int64(from) * f.part
		f.queue <- [2]int64{lo, min(int64(f.next)*f.part, f.size) - lo}
	}
	return f.err
}

// stop ends the hand-overs, once every queued one is done, and reports
// why the object is not whole: a hand-over failed, or bytes never
// landed. An object of no bytes is handed over here. Idempotent.
func (f *filling) stop() error {
	f.stopped.Do(func() {
		if f.size == 0 {
			_ = f.landed(0, 0)
		}
		close(f.queue)
	})
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if f.next < len(f.left) {
		var missing int64
		for _, b := range f.left {
			missing += b
		}
		return fmt.Errorf("%d of the object's %d bytes never arrived (%d of %d parts handed to the upload)", missing, f.size, f.next, len(f.left))
	}
	return nil
}

// compressionOf is the combined level's compression: the workers' own
// when they agree, else auto (each frame names its codec).
func compressionOf(m *manifest.Stage) string {
	c := ""
	for _, w := range m.Workers {
		switch {
		case c == "":
			c = w.Compression
		case c != w.Compression:
			return "auto"
		}
	}
	if c == "" {
		return "lz4"
	}
	return c
}

// codecName names a frame's codec byte as a manifest's codecs count it.
func codecName(b byte) string {
	switch b {
	case 0:
		return "none"
	case 1:
		return "lz4"
	case 2:
		return "zstd"
	}
	return "codec-" + fmt.Sprint(b)
}

// readAll GETs a whole object of at most limit bytes.
func readAll(ctx context.Context, st store.Reader, key string, limit int64) ([]byte, error) {
	body, err := st.GetRange(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", manifest.ErrCorrupt, key, limit)
	}
	return b, nil
}
