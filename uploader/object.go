package uploader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/retry"
)

// Upload is one data object being uploaded: a single PutObject when its
// only chunk is also its last, otherwise a multipart upload created lazily
// when the first full chunk is handed over. Safe for concurrent use.
type Upload struct {
	pool   *Pool
	ctx    context.Context
	key    string
	onFail func(error)
	ended  atomic.Bool // Finish or Abort ran (end)

	// createMu serializes CreateMultipartUpload (ensureUpload) without
	// holding mu over its round trip.
	createMu sync.Mutex
	mu       sync.Mutex
	uploadID string
	created  bool
	// prepared: Prepare was called, so the upload is (being) created and
	// part 1 streams from its first byte; the object never becomes a
	// single PutObject.
	prepared bool
	strays   bool // CreateMultipartUpload was retried: an unseen upload may exist
	// abortErr is the failure of an abort that Finish ran, kept for the
	// next Abort: Finish returns why the object failed, and the caller's
	// cleanup (which calls Abort) learns what it could not clean.
	abortErr error
	single   bool // written with one PutObject
	parts    []store.Part
	size     int64
	err      error
	cut      bool // a part's request was cut off by cancellation
	// wg counts the parts ready or in flight (and Prepare's create).
	wg       sync.WaitGroup
	finished bool

	// chunks counts the chunks handed over. ready holds the parts no
	// worker has taken yet, oldest first; queued is how many of the
	// pool's queue entries name this object (each worker that takes one
	// takes ready[0]). They match but for the moment after a re-cut into
	// fewer parts whose entries a worker had already taken.
	chunks int32
	ready  []*job
	queued int

	// Chunks kept after upload for a Keeper (see Keep).
	keeper    Keeper
	keepOff   bool // stopped keeping: a chunk did not fit
	kept      map[int32][]byte
	keptBytes int64 // reserved from the keeper for kept
}

// chunk is one buffer of an object's byte stream, from Pool.Acquire.
type chunk struct {
	n     int32  // 1-based, in stream order
	buf   []byte // its bytes (a Begin chunk's once it is complete)
	parts int    // parts ready or in flight that carry bytes of it
}

// Keeper is a byte budget that takes an object's uploaded chunk buffers
// instead of the pool reusing them (the sidecar's memory store). Safe for
// concurrent use.
type Keeper interface {
	// Reserve takes n bytes of the budget, or returns false.
	Reserve(n int64) bool
	// Unreserve gives back n reserved bytes; declined says they did not
	// fit.
	Unreserve(n int64, declined bool)
}

// Keep makes the object keep each chunk after it is uploaded, counted
// against k, instead of returning the buffer to the pool: no copy (a
// last chunk shorter than half a buffer is copied to its size, so the
// budget counts what it holds). When a chunk does not fit, the object
// stops keeping and gives back everything it kept. Call before the
// first Submit.
func (o *Upload) Keep(k Keeper) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.keeper = k
}

// keep takes chunk c's buffer once every part carrying its bytes is
// uploaded. It reports whether the object took the buffer itself (false:
// the pool reuses it).
func (o *Upload) keep(c *chunk) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keeper == nil || o.keepOff || o.err != nil {
		return false
	}
	buf, took := c.buf, true
	if len(buf) < cap(buf)/2 {
		buf, took = append([]byte(nil), buf...), false
	}
	n := int64(cap(buf))
	if !o.keeper.Reserve(n) {
		o.keepOff = true
		o.keeper.Unreserve(o.keptBytes, true)
		o.kept, o.keptBytes = nil, 0
		return false
	}
	if o.kept == nil {
		o.kept = map[int32][]byte{}
	}
	o.kept[c.n] = buf
	o.keptBytes += n
	return took
}

// Keeping reports whether every chunk uploaded so far was kept (false
// without a Keeper).
func (o *Upload) Keeping() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.keeper != nil && !o.keepOff && o.err == nil
}

// TakeKept hands over the kept chunks in stream order after a successful
// Finish (every chunk but the last one full, whatever parts carried
// them), with the bytes reserved for them, which the caller now owns
// (to admit or unreserve). ok is false, and nothing is reserved any
// more, unless every chunk was kept.
func (o *Upload) TakeKept() (chunks [][]byte, reserved int64, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	kept, n := o.kept, o.keptBytes
	o.kept, o.keptBytes = nil, 0
	parts := int(o.chunks)
	if o.keeper == nil || o.keepOff || o.err != nil || !o.finished || len(kept) != parts {
		if o.keeper != nil {
			o.keeper.Unreserve(n, false)
		}
		return nil, 0, false
	}
	chunks = make([][]byte, parts)
	for i := range chunks {
		c, has := kept[int32(i+1)]
		if !has {
			o.keeper.Unreserve(n, false)
			return nil, 0, false
		}
		chunks[i] = c
	}
	return chunks, n, true
}

// dropKept gives back every kept chunk.
func (o *Upload) dropKept() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keeper != nil && o.keptBytes > 0 {
		o.keeper.Unreserve(o.keptBytes, false)
	}
	o.kept, o.keptBytes = nil, 0
}

// Result describes an uploaded object.
type Result struct {
	Key   string
	Size  int64
	Parts int // 1 for a single put
}

// NewUpload starts the upload of an object at key. onFail, if set, is called once with
// the first permanent failure of any of its parts (to cancel the writer at
// once, not at close). ctx governs the uploads.
func (p *Pool) NewUpload(ctx context.Context, key string, onFail func(error)) *Upload {
	p.open.Add(1)
	return &Upload{pool: p, ctx: ctx, key: key, onFail: onFail}
}

// end counts the upload closed, once (Finish and Abort both end it, and
// Abort may follow Finish).
func (o *Upload) end() {
	if o.ended.CompareAndSwap(false, true) {
		o.pool.open.Add(-1)
		o.pool.idle()
	}
}

// Key returns the object's key.
func (o *Upload) Key() string { return o.key }

// Submit hands chunk buf (from Pool.Acquire) to the pool as chunk number
// n (1-based, ascending), which is part n while input flows. last says
// it is the object's final chunk; part 1 that is also last becomes a
// single PutObject. Over a pool that streams parts, the last chunk and
// the chunks no worker has taken yet are then re-cut into parts that end
// together (see planTail). Ownership of buf passes to the pool, which
// releases it once the parts carrying its bytes are uploaded. Does not
// block.
func (o *Upload) Submit(n int32, buf []byte, last bool) error {
	o.mu.Lock()
	if o.err != nil {
		err := o.err
		o.mu.Unlock()
		o.pool.Release(buf)
		return err
	}
	if n == 1 && last && !o.prepared {
		o.single = true
	}
	c := o.addChunkLocked(buf)
	o.ready = append(o.ready, &job{obj: o, part: n, buf: buf, last: last, chunks: []*chunk{c}, queued: time.Now()})
	o.wg.Add(1)
	if last {
		o.recutLocked()
	}
	return o.queueUnlock()
}

// addChunkLocked counts buf as the object's next chunk.
func (o *Upload) addChunkLocked(buf []byte) *chunk {
	o.chunks++
	return &chunk{n: o.chunks, buf: buf, parts: 1}
}

// queueUnlock matches the pool's queue entries for o to its ready parts,
// one each, then unlocks o.mu. Entries beyond the ready parts (a tail
// re-cut into fewer) are withdrawn unless a worker has one already; it
// then finds no part and moves on. On a closed pool the ready parts fail
// with their object, and their buffers go back.
func (o *Upload) queueUnlock() error {
	need := len(o.ready) - o.queued
	switch {
	case need > 0 && o.pool.q.push(o, need):
		o.queued += need
	case need > 0:
		return o.dropReadyUnlock(errClosed)
	case need < 0:
		need = -o.pool.q.withdraw(o, -need)
		o.queued += need
	}
	o.mu.Unlock()
	if o.pool.obs != nil && need != 0 {
		o.pool.obs.Queued(need)
	}
	return nil
}

// dropReadyUnlock fails the ready parts with err, returns their buffers
// and unlocks o.mu.
func (o *Upload) dropReadyUnlock(err error) error {
	ready := o.ready
	o.ready = nil
	o.mu.Unlock()
	for _, j := range ready {
		o.partDone(o.settle(j, err))
	}
	return err
}

// claim takes the object's oldest ready part for a worker that took one
// of its queue entries; nil when a re-cut left none.
func (o *Upload) claim() *job {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.queued--
	if len(o.ready) == 0 {
		return nil
	}
	j := o.ready[0]
	o.ready[0] = nil
	o.ready = o.ready[1:]
	return j
}

// settle gives back the buffers no part needs any more once j is done
// (err: how it ended): to the object's Keeper when every part of them was
// uploaded and it takes them, else to the pool. It returns err, or the
// Keeper's panic.
func (o *Upload) settle(j *job, err error) error {
	var done []*chunk
	o.mu.Lock()
	for _, c := range j.chunks {
		c.parts--
		if c.parts == 0 {
			done = append(done, c)
		}
	}
	o.mu.Unlock()
	for _, c := range done {
		took := false
		if err == nil {
			err = safe.Call(func() error { took = o.keep(c); return nil }, "keep of chunk %d of %s", c.n, o.key)
		}
		if took {
			o.pool.forget() // the buffer now belongs to the object's Keeper
		} else {
			o.pool.Release(c.buf)
		}
	}
	return err
}

// fixChunk sets j's bytes to buf[:n] of its chunk, a Begin chunk whose
// length is now fixed.
func (o *Upload) fixChunk(j *job, n int) {
	j.buf = j.fill.buf[:n]
	o.mu.Lock()
	j.chunks[0].buf = j.buf
	o.mu.Unlock()
}

func (o *Upload) upload(j *job) error {
	if err := o.failed(); err != nil {
		return err // a sibling failed; do not spend a request
	}
	if err := o.ctx.Err(); err != nil {
		return context.Cause(o.ctx)
	}
	var sum *uint32
	crc := uint32(0)
	if o.pool.cfg.Checksum {
		crc = store.CRC32C(j.buf)
		sum = &crc
	}
	if o.single {
		err := o.pool.hedged(o.ctx, func(ctx context.Context) error {
			return o.pool.st.Put(ctx, o.key, j.buf, store.PutOptions{CRC32C: sum})
		})
		if err != nil {
			return fmt.Errorf("put %s (%d bytes): %w", o.key, len(j.buf), err)
		}
		o.mu.Lock()
		o.size += int64(len(j.buf))
		o.mu.Unlock()
		return nil
	}
	id, err := o.ensureUpload()
	if err != nil {
		return err
	}
	// Both hedged requests carry the same bytes, so either ETag is right.
	var etag string
	var etagMu sync.Mutex
	err = o.pool.hedged(o.ctx, func(ctx context.Context) error {
		e, err := o.pool.st.UploadPart(ctx, o.key, id, j.part, j.buf, sum)
		if err == nil {
			etagMu.Lock()
			etag = e
			etagMu.Unlock()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("upload part %d of %s (%d bytes): %w", j.part, o.key, len(j.buf), err)
	}
	o.mu.Lock()
	o.parts = append(o.parts, store.Part{Number: j.part, ETag: etag, CRC32C: sum, Size: int64(len(j.buf))})
	o.size += int64(len(j.buf))
	o.mu.Unlock()
	return nil
}

// Prepare creates the object's multipart upload now, in the background,
// when the pool streams parts. A writer calls it once it knows its output
// will not be one small PutObject, so that part 1 starts streaming at its
// first byte rather than after StreamAfter bytes and a
// CreateMultipartUpload round trip. A prepared object that ends as one
// chunk is completed as a one-part multipart upload (its upload exists
// already). A failed create fails the object like a failed part. No-op
// when the pool does not stream, or after the first part was handed over
// whole.
func (o *Upload) Prepare() {
	if !o.pool.streams {
		return
	}
	o.mu.Lock()
	if o.prepared || o.single || o.created || o.err != nil {
		o.mu.Unlock()
		return
	}
	o.prepared = true
	o.wg.Add(1)
	o.mu.Unlock()
	go func() {
		err := safe.Call(func() error { _, err := o.ensureUpload(); return err }, "create of the multipart upload of %s", o.key)
		o.partDone(err)
	}()
}

// isPrepared reports whether Prepare was called.
func (o *Upload) isPrepared() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.prepared
}

// ensureUpload creates the multipart upload once; concurrent parts wait
// (on createMu: mu is not held over the round trip).
func (o *Upload) ensureUpload() (string, error) {
	o.createMu.Lock()
	defer o.createMu.Unlock()
	o.mu.Lock()
	created, id := o.created, o.uploadID
	o.mu.Unlock()
	if created {
		return id, nil
	}
	var attempts atomic.Int32
	err := safe.Call(func() (err error) {
		id, err = o.pool.st.CreateMultipart(retry.CountAttempts(o.ctx, &attempts), o.key)
		return err
	}, "the store's CreateMultipart")
	o.mu.Lock()
	defer o.mu.Unlock()
	// A create that panicked may have created the upload all the same,
	// under an ID never seen: Abort looks for it as for a retried create.
	o.strays = o.strays || attempts.Load() > 1 || safe.IsPanic(err)
	if err != nil {
		return "", fmt.Errorf("create multipart upload %s: %w", o.key, err)
	}
	o.uploadID, o.created = id, true
	return id, nil
}

func (o *Upload) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

func (o *Upload) partDone(err error) {
	if err != nil {
		o.mu.Lock()
		first := o.err == nil
		if first {
			o.err = err
		}
		if o.ctx.Err() != nil {
			o.cut = true
		}
		o.mu.Unlock()
		if first && o.onFail != nil {
			o.onFail(err)
		}
	}
	o.wg.Done()
}

// Finish waits for every submitted part and completes the upload; ctx
// bounds the CompleteMultipartUpload (with the object's own context). On
// any failure it aborts the upload and returns the first error; if that
// abort fails, the next Abort returns its failure.
func (o *Upload) Finish(ctx context.Context) (Result, error) {
	o.wg.Wait()
	defer o.end()
	o.mu.Lock()
	err, single, id, created := o.err, o.single, o.uploadID, o.created
	parts := slices.Clone(o.parts)
	size := o.size
	o.finished = true
	o.mu.Unlock()
	if err != nil {
		return Result{}, o.abortAfter(err)
	}
	if single {
		return Result{Key: o.key, Size: size, Parts: 1}, nil
	}
	if !created {
		return Result{}, fmt.Errorf("object %s: finished with no chunks", o.key)
	}
	slices.SortFunc(parts, func(a, b store.Part) int { return int(a.Number - b.Number) })
	for i, pt := range parts {
		if pt.Number != int32(i+1) {
			err := fmt.Errorf("object %s: part %d missing (have %d parts)", o.key, i+1, len(parts))
			return Result{}, o.abortAfter(err)
		}
	}
	// The Complete is bounded by the caller's ctx (Writer.Commit's) as
	// well as by the object's own: a commit that is given up on must not
	// go on completing uploads behind the caller's back.
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(o.ctx, func() { cancel(context.Cause(o.ctx)) })
	defer stop()
	if err := o.pool.st.CompleteMultipart(cctx, o.key, id, parts); err != nil && !o.completedBefore(err, size) {
		err = fmt.Errorf("complete multipart upload %s (%d parts, %d bytes): %w", o.key, len(parts), size, err)
		return Result{}, o.abortAfter(err)
	}
	if err := o.abortStrays(id); err != nil {
		return Result{}, err
	}
	return Result{Key: o.key, Size: size, Parts: len(parts)}, nil
}

// abortAgain makes sure an aborted upload stays gone when parts of it
// were cut off in flight: a server may still be writing such a part when
// the abort arrives and bring the upload back once it is done (S3's
// documentation says an abort may have to be repeated; versitygw does
// it). It checks a few times, briefly apart, and aborts again while the
// upload is listed. Best effort: the abort itself succeeded, so a listing
// or a repeated abort that fails (a store without quorum) is no error of
// the object's; what it misses is gc's and the lifecycle rule's.
func (o *Upload) abortAgain(ctx context.Context, id string) {
	for i := range 4 {
		t := time.NewTimer(time.Duration(50<<i) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		ups, err := o.pool.st.ListUploads(ctx, o.key)
		if err != nil {
			return
		}
		back := false
		for _, u := range ups {
			back = back || u.Key == o.key && u.UploadID == id
		}
		if !back {
			return
		}
		if err := o.pool.st.AbortMultipart(ctx, o.key, id); err != nil && !store.IsNotFound(err) {
			return
		}
	}
}

// abortStrays aborts uploads of this key other than keep, which exist only
// when a CreateMultipartUpload succeeded but its answer was lost.
func (o *Upload) abortStrays(keep string) error {
	o.mu.Lock()
	strays := o.strays
	o.strays = false
	o.mu.Unlock()
	if !strays {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), o.pool.cfg.CleanupTimeout)
	defer cancel()
	ups, err := o.pool.st.ListUploads(ctx, o.key)
	if err != nil {
		return fmt.Errorf("list uploads of %s after a retried create: %w", o.key, err)
	}
	var errs []error
	for _, u := range ups {
		if u.Key == o.key && u.UploadID != keep {
			if err := o.pool.st.AbortMultipart(ctx, u.Key, u.UploadID); err != nil && !store.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("abort stray upload of %s: %w", o.key, err))
			}
		}
	}
	return errors.Join(errs...)
}

// completedBefore settles a Complete that failed with NoSuchUpload: if an
// earlier try succeeded and only its answer was lost, the object is there
// with every byte, and the upload is rightly gone.
func (o *Upload) completedBefore(err error, size int64) bool {
	if !store.IsNotFound(err) {
		return false
	}
	objs, _, lerr := o.pool.st.List(o.ctx, o.key, "")
	if lerr != nil {
		return false
	}
	for _, obj := range objs {
		if obj.Key == o.key && obj.Size == size {
			o.mu.Lock()
			o.created = false // nothing left to abort
			o.mu.Unlock()
			return true
		}
	}
	return false
}

// abortAfter aborts the object after the failure err and returns err
// alone; a failed abort is kept for the next Abort to report.
func (o *Upload) abortAfter(err error) error {
	if aerr := o.Abort(); aerr != nil {
		o.mu.Lock()
		o.abortErr = aerr
		o.mu.Unlock()
	}
	return err
}

// Abort waits for parts in flight, then aborts the multipart upload on a
// context detached from the caller's, so a cancelled writer leaves no
// parts behind, within the pool's CleanupTimeout: a store that hangs
// the abort (MinIO without write quorum does) cannot hold the writer
// longer. A failure to abort is returned, never swallowed; the upload is
// then gc's to remove.
func (o *Upload) Abort() error {
	o.wg.Wait()
	defer o.end()
	o.dropKept()
	o.mu.Lock()
	id, created, prev, cut := o.uploadID, o.created, o.abortErr, o.cut
	o.created, o.abortErr = false, nil
	o.mu.Unlock()
	if prev != nil {
		return prev
	}
	var err error
	if created {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), o.pool.cfg.CleanupTimeout)
		defer cancel()
		if aerr := o.pool.st.AbortMultipart(ctx, o.key, id); aerr != nil && !store.IsNotFound(aerr) {
			err = fmt.Errorf("abort multipart upload %s: %w", o.key, aerr)
		} else if cut {
			o.abortAgain(ctx, id)
		}
	}
	return errors.Join(err, o.abortStrays(id))
}
