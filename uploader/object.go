package uploader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/store"
)

// Upload is one data object being uploaded: a single PutObject when its
// only chunk is also its last, otherwise a multipart upload created lazily
// when the first part needs it. Its chunks come from an Object (Sink.Take
// hands it over). Its methods are safe for concurrent use; Finish and
// Abort are its owner's (the writer's), one after the other: Finish
// once, then Abort if anything failed, as often as need be.
type Upload struct {
	pool   *Pool
	ctx    context.Context
	key    string
	onFail func(error)

	mp multipart
	// wg counts the parts ready or in flight (and an early create).
	wg sync.WaitGroup

	mu    sync.Mutex
	state state // changed by toLocked alone
	err   error // the first failure: the object is failed
	// cut: a part's request was cut off by cancellation, so the abort
	// is checked and repeated (see abortAgain).
	cut bool
	// abortErr is the failure of an abort that Finish ran, kept for the
	// next Abort: Finish returns why the object failed, and the caller's
	// cleanup (which calls Abort) learns what it could not clean.
	abortErr error
	parts    []store.Part // stored, in the order they were acknowledged
	size     int64        // bytes stored
	// chunks counts the chunks handed over. ready holds the parts no
	// worker has taken yet, oldest first; queued is how many of the
	// pool's queue entries name this object (each worker that takes one
	// takes ready[0]). They match but for the moment after a re-cut into
	// fewer parts whose entries a worker had already taken.
	chunks int32
	ready  []*part
	queued int
	keep   keeping // chunks kept for a Keeper
	// file is the files an object of sections is read from (see
	// ownFile): released once the upload is over.
	file *fileOwner
	// fromDisk: its parts are planned from disk (planDisk), and it counts
	// in Pool.fromDisk until it ends.
	fromDisk bool
}

// multipart is an object's multipart upload: created once, by the first
// of its parts (or an early create) that needs it, while the others wait; then
// its outcome is fixed. Read only once every part is done (Upload.wg),
// or through ensureUpload.
type multipart struct {
	once sync.Once
	id   string // "" unless created
	err  error
	// strays: the create was retried (or panicked), so an upload of the
	// key under an ID never seen may exist.
	strays bool
}

// Result describes an uploaded object.
type Result struct {
	Key   string
	Size  int64
	Parts int // 1 for a single put
}

// newUpload starts the upload of an object at key. onFail, if set, is
// called once with the first permanent failure of any of its parts (to
// cancel the writer at once, not at close). ctx governs the uploads.
func (p *Pool) newUpload(ctx context.Context, key string, onFail func(error)) *Upload {
	p.open.Add(1)
	return &Upload{pool: p, ctx: ctx, key: key, onFail: onFail}
}

// Key returns the object's key.
func (o *Upload) Key() string { return o.key }

// takeLocked says whether o takes chunk n now: nil, the object's failure,
// or an error naming the state that takes no chunks.
func (o *Upload) takeLocked(n int32) error {
	switch {
	case o.err != nil:
		return o.err
	case !o.state.takesChunks():
		return fmt.Errorf("chunk %d of %s: the upload takes no chunks when %s", n, o.key, o.state)
	}
	return nil
}

// submit hands chunk buf (from Pool.acquire) to the pool as chunk number
// n (1-based, ascending), which is part n while input flows. last says
// it is the object's final chunk (see lastLocked). Ownership of buf
// passes to the pool, which releases it once the parts carrying its
// bytes are uploaded. Does not block.
func (o *Upload) submit(n int32, buf []byte, last bool) error {
	return o.submitChunk(n, buf, last, false)
}

// submitChunk is submit; a borrowed buf is the caller's, not the pool's
// (Object.WriteFrom), and is never released nor kept.
func (o *Upload) submitChunk(n int32, buf []byte, last, borrowed bool) error {
	o.mu.Lock()
	if err := o.takeLocked(n); err != nil {
		o.mu.Unlock()
		if !borrowed {
			o.pool.release(buf)
		}
		return err
	}
	c := o.addChunkLocked(buf)
	c.borrowed = borrowed
	o.ready = append(o.ready, &part{obj: o, n: n, body: body{segs: [][]byte{buf}}, chunks: []*chunk{c}, queued: time.Now()})
	o.wg.Add(1)
	if last {
		// A borrowed chunk's parts are the caller's cut, kept as they
		// are (Object.WriteFrom).
		o.lastLocked(n == 1, !borrowed)
	}
	return o.queueUnlock()
}

// lastLocked records that the last chunk was handed over. Part 1 of an
// object that asked for no multipart upload (whole) is one PutObject.
// Any other object is sealed, and over a pool that streams parts the
// parts no worker has taken yet (the last chunk among them: recut) are
// re-cut into parts that end together (see planTail).
func (o *Upload) lastLocked(whole, recut bool) {
	if whole && o.state == stateOpen {
		_ = o.toLocked(stateSingle)
		return
	}
	if o.toLocked(stateSealed) == nil && recut {
		o.recutLocked()
	}
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
		return o.dropReadyUnlock(fmt.Errorf("object %s: %d parts not sent: %w", o.key, need, errClosed))
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
	for _, pt := range ready {
		o.partDone(o.settle(pt, err))
	}
	return err
}

// claim takes the object's oldest ready part for a worker that took one
// of its queue entries; nil when a re-cut left none.
func (o *Upload) claim() *part {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.queued--
	if len(o.ready) == 0 {
		return nil
	}
	pt := o.ready[0]
	o.ready[0] = nil
	o.ready = o.ready[1:]
	return pt
}

// settle gives back the buffers no part needs any more once pt is done
// (err: how it ended): to the object's Keeper when every part of them was
// uploaded and it takes them, else to the pool. It returns err, or the
// Keeper's panic.
func (o *Upload) settle(pt *part, err error) error {
	var done []*chunk
	o.mu.Lock()
	for _, c := range pt.chunks {
		c.parts--
		if c.parts == 0 {
			done = append(done, c)
		}
	}
	o.mu.Unlock()
	for _, c := range done {
		if c.borrowed {
			continue
		}
		took := false
		if err == nil {
			err = safe.Call(func() error { took = o.keepChunk(c); return nil }, "keep of chunk %d of %s", c.n, o.key)
		}
		switch f := pt.body.fill; {
		case took:
			o.pool.forget() // the buffer now belongs to the object's Keeper
		case f != nil && f.chunk == c && f.releaseLater():
			// A part that failed while its chunk fills: the writer
			// still appends to the buffer, and hands it back.
		default:
			o.pool.release(c.buf)
		}
	}
	return err
}

// prepare creates the object's multipart upload now, in the background,
// when the pool streams parts. An Object calls it when its size, told at
// Create, is more than a chunk, so that part 1 starts streaming at its
// first byte rather than after Config.streamAfter bytes and a
// CreateMultipartUpload round trip. A prepared object that ends as one
// chunk is completed as a one-part multipart upload (its upload exists
// already). A failed create fails the object like a failed part. No-op
// when the pool does not stream, or once the object is not open (its
// upload asked for already, or its only chunk handed over whole).
func (o *Upload) prepare() {
	if !o.pool.streams {
		return
	}
	o.createEarly()
}

// createEarly creates o's multipart upload in the background, before its
// first part, unless it has one or is no longer open.
func (o *Upload) createEarly() {
	o.mu.Lock()
	if o.state != stateOpen || o.toLocked(stateMultipart) != nil {
		o.mu.Unlock()
		return
	}
	o.wg.Add(1)
	o.mu.Unlock()
	go func() {
		err := safe.Call(func() error { _, err := o.ensureUpload(); return err }, "create of the multipart upload of %s", o.key)
		o.partDone(err)
	}()
}

// ensureUpload creates the multipart upload once and returns its ID;
// concurrent parts wait for it, and later ones get the same answer. An
// object still open is no longer: it will not be one put.
func (o *Upload) ensureUpload() (string, error) {
	o.mp.once.Do(func() {
		o.mu.Lock()
		if o.state == stateOpen {
			_ = o.toLocked(stateMultipart)
		}
		o.mu.Unlock()
		var attempts atomic.Int32
		var id string
		err := safe.Call(func() (err error) {
			id, err = o.pool.st.CreateMultipart(retry.CountAttempts(o.ctx, &attempts), o.key)
			return err
		}, "the store's CreateMultipart")
		// A create retried, or one that failed (its answer lost, cut
		// off by the object's cancellation, or a panic), may have
		// created an upload all the same, under an ID never seen: Abort
		// (or the Complete) looks for it.
		o.mp.strays = attempts.Load() > 1 || err != nil
		if err != nil {
			o.mp.err = fmt.Errorf("create multipart upload %s: %w", o.key, err)
			return
		}
		o.mp.id = id
	})
	return o.mp.id, o.mp.err
}

// partDone ends one of the object's parts (or an early create); a
// failure fails the object, and the first one is told to onFail.
func (o *Upload) partDone(err error) {
	if err != nil {
		o.mu.Lock()
		first := o.err == nil
		if first {
			o.err = err
			if terr := o.toLocked(stateFailed); terr != nil {
				o.err = errors.Join(err, terr)
			}
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

// Finish waits for every part handed over and completes the upload; ctx
// bounds the CompleteMultipartUpload (with the object's own context). On
// any failure it aborts the upload and returns the first error; if that
// abort fails, the next Abort returns its failure. Call it once; a
// second Finish, or one after Abort, is refused with an error naming the
// upload's state.
func (o *Upload) Finish(ctx context.Context) (Result, error) {
	o.wg.Wait()
	o.mu.Lock()
	from, err := o.state, o.err
	parts, size := slices.Clone(o.parts), o.size
	switch from {
	case stateFailed:
	case stateOpen:
		err = fmt.Errorf("object %s: finished with no chunks", o.key)
	case stateSingle:
		if err := o.toLocked(stateCompleted); err != nil {
			o.mu.Unlock()
			return Result{}, err
		}
		o.mu.Unlock()
		return Result{Key: o.key, Size: size, Parts: 1}, nil
	default:
		if err := o.toLocked(stateCompleting); err != nil {
			o.mu.Unlock()
			return Result{}, err
		}
	}
	o.mu.Unlock()
	id := o.mp.id
	if err == nil && id == "" {
		err = fmt.Errorf("object %s: finished with no multipart upload (%d parts stored)", o.key, len(parts))
	}
	if err != nil {
		return Result{}, o.abortAfter(err)
	}
	if err := o.complete(ctx, id, parts, size); err != nil {
		return Result{}, o.abortAfter(err)
	}
	o.mu.Lock()
	err = o.toLocked(stateCompleted)
	o.mu.Unlock()
	if err != nil {
		return Result{}, err
	}
	o.releaseFile()
	if err := o.abortStrays(id); err != nil {
		return Result{}, err
	}
	return Result{Key: o.key, Size: size, Parts: len(parts)}, nil
}

// complete assembles parts, every one from 1 on, into the object with
// CompleteMultipartUpload of upload id, bounded by ctx and the object's
// own context.
func (o *Upload) complete(ctx context.Context, id string, parts []store.Part, size int64) error {
	slices.SortFunc(parts, func(a, b store.Part) int { return int(a.Number - b.Number) })
	for i, pt := range parts {
		if pt.Number != int32(i+1) {
			return fmt.Errorf("object %s: part %d missing (have %d parts)", o.key, i+1, len(parts))
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
		return fmt.Errorf("complete multipart upload %s (%d parts, %d bytes): %w", o.key, len(parts), size, err)
	}
	return nil
}

// abortStrays aborts uploads of this key other than keep, which exist only
// when a CreateMultipartUpload succeeded but its answer was lost. Called
// once, as the upload ends (completed or aborted).
func (o *Upload) abortStrays(keep string) error {
	if !o.mp.strays {
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
// then gc's to remove. Idempotent: a second Abort makes no request and
// returns nil, or the failure of an abort Finish ran (once). After a
// successful Finish there is nothing to abort (the object is stored; the
// caller deletes it).
func (o *Upload) Abort() error {
	o.wg.Wait()
	o.dropKept()
	// No part reads the file any more.
	defer o.releaseFile()
	o.mu.Lock()
	from, prev, cut := o.state, o.abortErr, o.cut
	o.abortErr = nil
	if from == stateAborted {
		o.mu.Unlock()
		return prev
	}
	err := o.toLocked(stateAborted)
	o.mu.Unlock()
	if err != nil || from == stateCompleted {
		return err
	}
	id := o.mp.id
	if id != "" {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), o.pool.cfg.CleanupTimeout)
		defer cancel()
		if aerr := o.pool.st.AbortMultipart(ctx, o.key, id); aerr != nil && !store.IsNotFound(aerr) {
			err = fmt.Errorf("abort multipart upload %s: %w", o.key, aerr)
		} else if cut {
			abortAgain(ctx, o.pool.st, o.key, id)
		}
	}
	return errors.Join(err, o.abortStrays(id))
}
