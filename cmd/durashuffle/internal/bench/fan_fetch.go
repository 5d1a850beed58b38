package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/store"
)

// fetchPiece is one GET: n bytes of key from off; n < 0 is the whole
// object.
type fetchPiece struct {
	key    string
	off, n int64
}

// prefetcher GETs pieces in the background in their order, at most ahead
// of them fetched or in flight and not yet consumed (a reader's
// read_ahead: its GETs in flight, and its memory), and hands them over
// in order. Not safe for concurrent use.
type prefetcher struct {
	out   []chan fetched
	slots chan struct{}
	pos   int
	held  bool
	stop  context.CancelFunc
}

type fetched struct {
	b   []byte
	err error
}

// prefetch starts fetching pieces from st; the caller calls stop when
// done, which cancels what is still in flight.
func prefetch(ctx context.Context, st store.Reader, pieces []fetchPiece, ahead int) *prefetcher {
	ctx, cancel := context.WithCancel(ctx)
	f := &prefetcher{out: make([]chan fetched, len(pieces)), slots: make(chan struct{}, max(1, ahead)), stop: cancel}
	for i := range f.out {
		f.out[i] = make(chan fetched, 1)
	}
	go func() {
		for i, pc := range pieces {
			select {
			case f.slots <- struct{}{}:
			case <-ctx.Done():
				f.out[i] <- fetched{err: context.Cause(ctx)}
				return
			}
			go func() {
				b, err := getPiece(ctx, st, pc)
				f.out[i] <- fetched{b, err}
			}()
		}
	}()
	return f
}

// next returns the next piece's bytes, and frees the slot of the one
// returned before.
func (f *prefetcher) next() ([]byte, error) {
	if f.held {
		<-f.slots
		f.held = false
	}
	if f.pos >= len(f.out) {
		return nil, io.EOF
	}
	r := <-f.out[f.pos]
	f.pos++
	f.held = r.err == nil
	return r.b, r.err
}

// reader returns the next n pieces as one stream.
func (f *prefetcher) reader(n int) io.Reader {
	return &pieceReader{f: f, left: n}
}

type pieceReader struct {
	f    *prefetcher
	left int
	cur  []byte
}

func (r *pieceReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.left == 0 {
			return 0, io.EOF
		}
		b, err := r.f.next()
		if err != nil {
			return 0, err
		}
		r.cur, r.left = b, r.left-1
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// getPiece reads one piece whole.
func getPiece(ctx context.Context, st store.Reader, pc fetchPiece) ([]byte, error) {
	rc, err := st.GetRange(ctx, pc.key, pc.off, pc.n)
	if err != nil {
		return nil, fmt.Errorf("get %s [%d, +%d): %w", pc.key, pc.off, pc.n, err)
	}
	defer rc.Close()
	if pc.n < 0 {
		return io.ReadAll(rc)
	}
	b := make([]byte, pc.n)
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, fmt.Errorf("get %s [%d, +%d): %w", pc.key, pc.off, pc.n, err)
	}
	return b, nil
}

// drainIPC decodes an Arrow IPC stream to its end, adding its rows and
// logical bytes.
func drainIPC(r io.Reader, rows, logical *atomic.Int64) error {
	rd, err := ipc.NewReader(r, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return err
	}
	defer rd.Release()
	for rd.Next() {
		rec := rd.RecordBatch()
		rows.Add(rec.NumRows())
		logical.Add(frame.LogicalSize(rec))
	}
	return rd.Err()
}
