package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/store"
)

// druidKey is writer w's object of partition p.
func druidKey(j *Job, w, p int) string {
	return fanKey(j, "druid", fmt.Sprintf("w%05d-p%05d", w, p))
}

// writeDruid is Druid's durable-storage layout: every writer sorts its
// rows by partition on local disk (runSorter, with the same memory as
// durashuffle's coalesce_budget), then uploads one object per partition,
// each an Arrow IPC stream of the partition's LZ4 batches (an empty
// partition's object has no batch), with the same part size and the same
// number of requests in flight as durashuffle's uploads, on
// durashuffle's own S3 store and retry layer.
func writeDruid(ctx context.Context, j *Job) (*Result, error) {
	st, counter, clock, done, err := writeStore(ctx, j)
	if err != nil {
		return nil, err
	}
	defer done()
	cfg := j.Config
	up := newObjectUploader(st, int64(cfg.Write.ChunkSize), cfg.Write.UploadConcurrency, cfg.BufferedChunks(), cfg.Write.Checksum == "crc32c", cfg.Write.CleanupTimeout.D())
	parts := j.Data.Partitions
	return writeSorted(ctx, j, counter, clock, parts, func(ctx context.Context, w int, s *runSorter, _ *diskMeter) (int64, error) {
		prefix := schemaPrefix()
		var stored int64
		ug, uctx := errgroup.WithContext(ctx)
		for p := range parts {
			size := int64(len(prefix)) + s.partitionSize(p) + int64(len(eos))
			body := io.MultiReader(bytes.NewReader(prefix), s.partition(p), bytes.NewReader(eos))
			if err := up.upload(uctx, ug, druidKey(j, w, p), size, body); err != nil {
				ug.Wait()
				return 0, fmt.Errorf("writer %d: %w", w, err)
			}
			stored += size
		}
		return stored, ug.Wait()
	})
}

// objectUploader uploads whole objects read from a reader: one
// PutObject when the object fits in a part, else a multipart upload of
// part-sized parts. At most conc requests are in flight and bufs
// part-sized buffers filled (durashuffle's upload_concurrency and
// max_buffered_chunks). Safe for concurrent use.
type objectUploader struct {
	st       store.Store
	chunk    int64
	sem      chan struct{}
	bufs     chan []byte
	checksum bool
	cleanup  time.Duration
}

func newObjectUploader(st store.Store, chunk int64, conc, bufs int, checksum bool, cleanup time.Duration) *objectUploader {
	u := &objectUploader{st: st, chunk: chunk, sem: make(chan struct{}, max(1, conc)), bufs: make(chan []byte, max(1, bufs)), checksum: checksum, cleanup: cleanup}
	for range max(1, bufs) {
		u.bufs <- nil // allocated on first use
	}
	return u
}

func (u *objectUploader) buffer(ctx context.Context) ([]byte, error) {
	select {
	case b := <-u.bufs:
		if b == nil {
			b = make([]byte, u.chunk)
		}
		return b, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// request runs f as one of the requests in flight.
func (u *objectUploader) request(ctx context.Context, f func() error) error {
	select {
	case u.sem <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer func() { <-u.sem }()
	return f()
}

func (u *objectUploader) crc(b []byte) *uint32 {
	if !u.checksum {
		return nil
	}
	c := store.CRC32C(b)
	return &c
}

// upload reads size bytes from body and starts their upload as key on
// g; it returns once every byte is in a buffer. A failed multipart
// upload is aborted on a context of its own, so that a cancelled caller
// leaves no upload behind.
func (u *objectUploader) upload(ctx context.Context, g *errgroup.Group, key string, size int64, body io.Reader) error {
	if size <= u.chunk {
		b, err := u.buffer(ctx)
		if err != nil {
			return err
		}
		if _, err := io.ReadFull(body, b[:size]); err != nil {
			u.bufs <- b
			return fmt.Errorf("read %s (%d bytes): %w", key, size, err)
		}
		g.Go(func() error {
			defer func() { u.bufs <- b }()
			return u.request(ctx, func() error {
				if err := u.st.Put(ctx, key, b[:size], store.PutOptions{CRC32C: u.crc(b[:size])}); err != nil {
					return fmt.Errorf("put %s (%d bytes): %w", key, size, err)
				}
				return nil
			})
		})
		return nil
	}
	var id string
	if err := u.request(ctx, func() (err error) {
		id, err = u.st.CreateMultipart(ctx, key)
		return err
	}); err != nil {
		return fmt.Errorf("create multipart upload of %s: %w", key, err)
	}
	n := (size + u.chunk - 1) / u.chunk
	parts := make([]store.Part, n)
	var pg errgroup.Group
	var err error
	for i := range n {
		var b []byte
		if b, err = u.buffer(ctx); err != nil {
			break
		}
		length := min(u.chunk, size-i*u.chunk)
		if _, err = io.ReadFull(body, b[:length]); err != nil {
			u.bufs <- b
			err = fmt.Errorf("read part %d of %s (%d bytes): %w", i+1, key, length, err)
			break
		}
		pg.Go(func() error {
			defer func() { u.bufs <- b }()
			crc := u.crc(b[:length])
			return u.request(ctx, func() error {
				body := store.BytesBody(b[:length])
				if crc != nil {
					body = body.WithCRC32C(*crc)
				}
				pt, err := u.st.UploadPart(ctx, key, id, int32(i+1), body)
				if err != nil {
					return fmt.Errorf("upload part %d of %s (%d bytes): %w", i+1, key, length, err)
				}
				parts[i] = pt
				return nil
			})
		})
	}
	abort := func(err error) error {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), u.cleanup)
		defer cancel()
		if aerr := u.st.AbortMultipart(actx, key, id); aerr != nil {
			return fmt.Errorf("%w (abort: %v)", err, aerr)
		}
		return err
	}
	if err != nil {
		return abort(errorsJoin(err, pg.Wait()))
	}
	g.Go(func() error {
		if err := pg.Wait(); err != nil {
			return abort(err)
		}
		if err := u.request(ctx, func() error { return u.st.CompleteMultipart(ctx, key, id, parts) }); err != nil {
			return abort(fmt.Errorf("complete %s (%d parts): %w", key, n, err))
		}
		return nil
	})
	return nil
}

// readDruid: Readers readers at once, each reading its contiguous range
// of about P / Readers partitions from every writer with one GET per
// object, read_ahead GETs in flight per reader (durashuffle's reader
// has as many), every batch decoded and counted.
func readDruid(ctx context.Context, j *Job) (*Result, error) {
	st, gets, counter, done, err := fanReadStore(ctx, j)
	if err != nil {
		return nil, err
	}
	defer done()
	workers, parts := max(1, j.Data.Workers), max(1, j.Data.Partitions)
	ranges := demo.Ranges(int64(parts), min(max(1, j.Readers), parts))
	return readEachRange(ctx, j, counter, gets, ranges, func(ctx context.Context, rg demo.Range, rows, logical *atomic.Int64) error {
		var pieces []fetchPiece
		for w := range workers {
			for p := rg.Lo; p < rg.Hi; p++ {
				pieces = append(pieces, fetchPiece{key: druidKey(j, w, int(p)), n: -1})
			}
		}
		f := prefetch(ctx, st, pieces, j.Config.Read.Ahead)
		defer f.stop()
		for _, pc := range pieces {
			b, err := f.next()
			if err != nil {
				return err
			}
			if err := drainIPC(bytes.NewReader(b), rows, logical); err != nil {
				return fmt.Errorf("%s: %w", pc.key, err)
			}
		}
		return nil
	})
}
