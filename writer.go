package durashuffle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/uploader"
)

// WriterOptions name the output a Writer produces.
type WriterOptions struct {
	Query      string
	Stage      int
	Worker     string
	Attempt    string // empty: a fresh ID, a time stamp and random bits
	Partitions int
	// Schema of every record; nil takes the first record's schema.
	Schema *arrow.Schema
	// Results marks a query's final results stage (kept for
	// results_retention by gc rather than until the query is deleted).
	Results bool
	Mem     memory.Allocator
	// Key, when set, is the root key of the query for this writer alone
	// (32 bytes): its frames are sealed under the stage key derived from
	// it, whatever the client's own key source (the sidecar takes it per
	// call). Nil: the client's (WithEncryptionKey, encryption_key, its
	// file, KMS), or no encryption.
	Key []byte
}

// Writer is one worker attempt's output: Write from any number of
// goroutines, then Commit or Abort once.
type Writer struct {
	c     *Client
	opt   WriterOptions
	write string // this writer's own ID in its data keys (manifest.NewWriteID)
	// encryption is what the worker manifest records of the key its
	// frames are sealed with; nil: they are not.
	encryption *manifest.Encryption
	ctx        context.Context
	cancel     context.CancelCauseFunc
	ch         *chunker.Writer
	// up hands the chunker's chunks to the client's upload pool and
	// holds the uploads of the attempt's data objects.
	up *uploader.Sink

	mu   sync.Mutex
	done bool
}

// newAttemptID returns a fresh attempt ID: a time stamp and random bits,
// so attempts sort by start time.
func newAttemptID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// NewWriter starts a worker attempt. IDs are validated before any request.
func (c *Client) NewWriter(ctx context.Context, opt WriterOptions) (*Writer, error) {
	if opt.Attempt == "" {
		opt.Attempt = newAttemptID()
	}
	for _, id := range []struct{ kind, v string }{{"query", opt.Query}, {"worker", opt.Worker}, {"attempt", opt.Attempt}} {
		if err := manifest.ValidateID(id.kind, id.v); err != nil {
			return nil, err
		}
	}
	if err := manifest.ValidateStage(opt.Stage); err != nil {
		return nil, err
	}
	if opt.Partitions < 1 || opt.Partitions > MaxPartitions {
		return nil, fmt.Errorf("%w: partitions must be between 1 and %d (MaxPartitions), got %d", ErrPartitionCount, MaxPartitions, opt.Partitions)
	}
	sp, err := c.spill.get()
	if err != nil {
		return nil, err
	}
	w := &Writer{c: c, opt: opt, write: manifest.NewWriteID()}
	sealer, err := w.sealer(ctx)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	w.ctx, w.cancel = wctx, cancel
	w.up = c.pool.NewSink(wctx, uploader.SinkOptions{
		Key: func(obj int) string {
			return c.layout.ObjectKey(opt.Query, opt.Stage, c.layout.DataKey(opt.Query, opt.Stage, opt.Worker, opt.Attempt, w.write, obj))
		},
		OnFail: func(err error) {
			w.ch.Fail(err)
			w.cancel(err)
		},
		Keeper:        c.keeper(),
		MaxObjectSize: int64(c.cfg.Write.MaxObjectSize),
	})
	ch, err := chunker.New(wctx, chunker.Options{
		Schema:           opt.Schema,
		Partitions:       opt.Partitions,
		FrameTargetBytes: int64(c.cfg.Write.FrameTargetBytes),
		CoalesceBudget:   int64(c.cfg.Write.CoalesceBudget),
		Encoders:         c.cfg.Encoders(),
		Compression:      c.cfg.Write.Compression,
		Mem:              opt.Mem,
		Spill:            sp,
		Seal:             sealer,
	}, w.up)
	if err != nil {
		// The options do not fit (the partitions' state past half of
		// coalesce_budget): the configuration's, or the caller's
		// partition count.
		err = fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		cancel(err)
		return nil, err
	}
	w.ch = ch
	// A failure inside the chunker (an encoder's error, a full frame
	// index) ends the uploads too, so a part streaming from the chunk
	// being filled stops waiting for bytes that will not come, whether
	// or not the caller aborts.
	ch.OnFail(func(err error) { w.cancel(err) })
	return w, nil
}

// sealer returns the sealer of the writer's frames, under its stage's
// key with its write ID as every nonce's prefix; nil when the client
// does not encrypt.
func (w *Writer) sealer(ctx context.Context) (*frame.Sealer, error) {
	key, e, err := w.c.stageKey(ctx, w.opt.Query, w.opt.Stage, w.opt.Key)
	if err != nil || key == nil {
		return nil, err
	}
	var id [frame.WriteIDSize]byte
	if _, err := hex.Decode(id[:], []byte(w.write)); err != nil {
		return nil, fmt.Errorf("write ID %q: %w", w.write, err)
	}
	s, err := frame.NewSealer(key, w.opt.Query, w.opt.Stage, w.opt.Worker, w.opt.Attempt, id)
	if err != nil {
		return nil, err
	}
	w.encryption = e
	return s, nil
}

// MaxPartitions bounds the partition count of a stage (manifests refuse
// more).
const MaxPartitions = manifest.MaxPartitions

// Options returns the writer's options (with the attempt ID filled in).
func (w *Writer) Options() WriterOptions { return w.opt }

// Write adds rec's rows to partition. Safe for concurrent use. It blocks
// while the upload budget is spent and returns the writer's first failure
// at once. The caller keeps its reference to rec.
//
// Every batch is validated before any of it is taken: it must have at
// least one column, each column as long as the batch and of its field's
// type, and pass Arrow's full validation (array.ValidateFull: buffer
// sizes, null counts, every string, binary and list offset non-negative,
// non-decreasing and within its values, UTF-8 of strings, dictionary
// indices, nested children). An invalid batch is refused with an error
// wrapping ErrBatch that names the partition, the column and its type,
// and what is wrong, e.g. `batch for partition 7: invalid record batch:
// column 15 "l_comment" (utf8): arrow/array: string offsets are not
// monotonically non-decreasing at index 3: 0 < 10`. As with a batch of
// another schema (ErrSchema) or a partition out of range (ErrPartition),
// the writer keeps what it had: Commit commits the batches taken before,
// Abort drops them. The check reads every offset and string byte once:
// a small share of Write's CPU beside encoding, largest for batches of a
// few rows (BENCHMARKS.md has the figures).
func (w *Writer) Write(partition int, rec arrow.RecordBatch) error {
	return w.ch.Write(partition, rec)
}

// WritePartitioned adds every row of rec to its partition, row i to
// partitions[i]: a whole batch of a map task's output at once, which the
// writer scatters itself, gathering each partition's rows (no slice of
// the batch per partition). Rows keep their input order within each
// partition. Safe for concurrent use; it blocks and fails as Write does,
// and the caller keeps rec and partitions.
//
// The batch is validated as Write validates it, and partitions must hold
// one partition in [0, Partitions) per row: otherwise nothing is taken,
// and the error wraps ErrBatch, or ErrPartition naming the row, its
// partition and the count (or the vector's length and the batch's).
func (w *Writer) WritePartitioned(rec arrow.RecordBatch, partitions []int32) error {
	return w.ch.WritePartitioned(rec, partitions)
}

// WriteKeyed adds every row of rec to the partition of its value in
// column keyColumn, by the hash of package partition
// (docs/partitioning.md): the same value goes to the same partition
// whatever its encoding, in every worker that uses it. It fails as
// WritePartitioned does, or, taking nothing, with an error naming the
// column when it is out of range or of a type with no partitioning key
// (nested types and the null type; partition.CheckKeyType tells before
// any batch).
func (w *Writer) WriteKeyed(rec arrow.RecordBatch, keyColumn int) error {
	return w.ch.WriteKeyed(rec, keyColumn)
}

// Commit flushes the remaining buffers, waits for every part, completes
// the uploads and writes the worker manifest with a conditional put. ctx
// bounds all of it, CompleteMultipartUpload included: if ctx ends first,
// Commit fails with its cause, and nothing is committed and no upload is
// left open. The
// client's commit guard runs before the manifest put (see
// Client.CheckCommitGuard): on a store that does not enforce the
// condition the attempt's objects are deleted and the error wraps
// ErrCommitGuard. If
// another attempt committed first, this attempt's objects are deleted and
// the error wraps manifest.ErrAlreadyCommitted. So it is when another
// writer of the same attempt ID committed first: every writer stores under
// keys of its own, so committed bytes are never overwritten; only if the
// committed output is this writer's content to the byte (a rerun after a
// lost answer) does Commit succeed, returning the committed manifest. On
// any failure nothing is visible to readers and no multipart upload is
// left open. Should the manifest put fail in a way that may have stored
// it and reading it back fail too, the error wraps
// manifest.ErrCommitUnknown and the objects are kept (gc removes them if
// no manifest refers to them).
func (w *Writer) Commit(ctx context.Context) (*manifest.Worker, error) {
	if !w.finish() {
		return nil, chunker.ErrClosed
	}
	// ctx bounds the whole commit: the last frames' encoding, the parts
	// still in flight, every CompleteMultipartUpload and the manifest put.
	// When it ends first, the writer fails with its cause and cleans up.
	stop := context.AfterFunc(ctx, func() {
		w.cancel(fmt.Errorf("commit worker %s of %s stage %d: %w", w.opt.Worker, w.opt.Query, w.opt.Stage, context.Cause(ctx)))
		w.ch.Fail(context.Cause(ctx))
	})
	defer stop()
	res, err := w.ch.Close()
	if err != nil {
		return nil, w.cleanup(err)
	}
	objs := w.up.Take()
	m := &manifest.Worker{
		Query:         w.opt.Query,
		Stage:         w.opt.Stage,
		Worker:        w.opt.Worker,
		Attempt:       w.opt.Attempt,
		Compression:   w.c.cfg.Write.Compression,
		Partitions:    w.opt.Partitions,
		ChunkSize:     int64(w.c.cfg.Write.ChunkSize),
		Results:       w.opt.Results,
		WriterVersion: version,
		Encryption:    w.encryption,
	}
	var firstErr error
	for i, o := range objs {
		r, err := o.Finish(ctx)
		if err != nil {
			firstErr = errors.Join(firstErr, err)
			continue
		}
		want := res.Objects[i]
		if r.Size != want.Size {
			firstErr = errors.Join(firstErr, fmt.Errorf("object %s: stored %d bytes in %d parts, wrote %d bytes", r.Key, r.Size, r.Parts, want.Size))
		}
		// The pool chose the parts: the manifest counts the parts stored.
		want.Parts = r.Parts
		want.Key = w.c.layout.DataKey(w.opt.Query, w.opt.Stage, w.opt.Worker, w.opt.Attempt, w.write, i)
		m.Objects = append(m.Objects, want)
	}
	if firstErr != nil {
		return nil, w.cleanupObjects(objs, firstErr)
	}
	schema := res.Schema
	m.Codecs = res.Codecs
	if schema == nil {
		schema = w.opt.Schema
	}
	if schema == nil {
		schema = arrow.NewSchema(nil, nil) // no rows were ever written
	}
	if m.Schema, err = frame.EncodeSchema(schema); err != nil {
		return nil, w.cleanupObjects(objs, err)
	}
	m.Frames = res.Frames
	m.WrittenAt = time.Now().UTC()
	// Before the one write that is visible: on a store that ignores
	// If-None-Match, the manifest put below would not be a commit point.
	// (After the data, so that a store that refuses writes says so in the
	// data's own requests.)
	if err := w.c.CheckCommitGuard(ctx); err != nil {
		err = fmt.Errorf("commit worker %s of %s stage %d, attempt %s: %w", w.opt.Worker, w.opt.Query, w.opt.Stage, w.opt.Attempt, err)
		return nil, w.cleanupObjects(objs, err)
	}
	w.c.advertise(m, objs)
	won, err := manifest.Commit(ctx, w.c.st, w.c.layout, m)
	switch {
	case errors.Is(err, manifest.ErrCommitUnknown):
		// The manifest may refer to the objects: keep them (gc deletes
		// them if it does not).
		w.cancel(err)
		return nil, err
	case err != nil:
		return nil, w.cleanupObjects(objs, err)
	case won != m:
		// An earlier writer of this attempt committed the same content;
		// its objects stand, these are nobody's.
		// What a failed delete leaves is unreferenced: gc's.
		_ = w.cleanupObjects(objs, chunker.ErrClosed)
		return won, nil
	}
	w.c.admit(m, objs)
	w.cancel(chunker.ErrClosed)
	return m, nil
}

// Abort drops the attempt: buffered rows are released, multipart uploads
// aborted and stored objects deleted, all on a context detached from the
// caller's. It returns an error only if cleanup itself failed.
func (w *Writer) Abort() error {
	if !w.finish() {
		return nil
	}
	err := fmt.Errorf("writer aborted")
	w.ch.Abort(err)
	if cerr := w.cleanup(err); cerr != err {
		return cerr // cleanup itself failed
	}
	return nil
}

func (w *Writer) finish() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return false
	}
	w.done = true
	return true
}

// cleanup aborts and deletes everything this attempt stored, then returns
// cause joined with any cleanup failure.
func (w *Writer) cleanup(cause error) error {
	return w.cleanupObjects(w.up.Take(), cause)
}

func (w *Writer) cleanupObjects(objs []*uploader.Upload, cause error) error {
	w.cancel(cause)
	timeout := w.c.cfg.Write.CleanupTimeout.D()
	if timeout <= 0 {
		timeout = uploader.DefaultCleanupTimeout
	}
	var errs []error
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		if err := o.Abort(); err != nil {
			errs = append(errs, err)
		}
		keys = append(keys, o.Key())
	}
	if len(keys) > 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), timeout)
		defer cancel()
		if err := w.c.st.Delete(ctx, keys...); err != nil {
			errs = append(errs, fmt.Errorf("delete %d objects of attempt %s: %w", len(keys), w.opt.Attempt, err))
		}
	}
	if len(errs) == 0 {
		return cause
	}
	return &CleanupError{Err: cause, Cleanup: errors.Join(errs...), Attempt: w.opt.Attempt, Timeout: timeout}
}
