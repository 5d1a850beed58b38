package chunker

import (
	"context"
	"fmt"
	"time"

	"github.com/durashuffle/durashuffle/internal/entry"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// appender is the appending goroutine's state: only that goroutine holds
// it while it runs, and it hands it to Close or Abort when it ends. It
// puts encoded frames into the object's byte stream in seq order, cuts
// the stream into chunks for the sink and indexes every frame; a sorted
// writer's appender keeps the writing phase's frames instead (keep) and
// queues the object's frames at its end. It gives each frame's budget
// back once the frame is in.
type appender struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	b      *budget   // to give bytes back, and for the index capacity reserved
	q      *jobQueue // for a sorted writer's output frames
	sink   Sink
	// stream is the sink when it streams chunks as they fill; nil for a
	// sorted writer's object that will stay under a chunk.
	stream StreamSink
	auto   *autoCodec // compression auto: told how long chunk buffers took

	chunk, maxObject int64 // chunk_size, and the most an object may take
	partitions       int
	frameTarget      int64
	keep             *keeper // a sorted writer's kept frames; nil if not sorted

	// A sorted writer's spilled object goes to files (filesink.go) when
	// files is set: then fileMode, and img is the object being written.
	files    FileSink
	spillDir *spill.Dir
	fileMode bool
	img      *image
	// maxFileObject is max_object_size for an object in a file (its
	// parts are not chunks: not bounded by chunk_size x 10,000).
	maxFileObject int64
	// fileEst is the stored bytes the kept frames were estimated to make,
	// fileIn their bytes; fileInDone of those are in frames appended, and
	// fileOutDone is the bytes those frames took in the files.
	fileEst, fileIn, fileInDone, fileOutDone int64

	cur     []byte // the chunk being filled, from sink.Acquire
	obj     int
	part    int32
	objOff  int64
	objCRC  uint32
	objects []entry.Object
	frames  []entry.Frame
	rows    int64
	bytes   int64
	codecs  map[string]int // frames per codec (from their headers)
}

// run appends results in seq order until the encoders end, then sends
// the appender on done.
func (a *appender) run(results <-chan encoded, done chan<- *appender) {
	defer func() { done <- a }()
	waiting := map[int64]encoded{}
	var next int64
	for res := range results {
		waiting[res.seq] = res
		for {
			r, ok := waiting[next]
			if !ok {
				break
			}
			delete(waiting, next)
			next++
			if r.end {
				a.output()
			} else {
				a.take(r)
			}
			a.q.appended(next)
		}
	}
}

// take puts r into the stream (a sorted writer's writing-phase frame:
// keeps it), and gives its budget back.
func (a *appender) take(r encoded) {
	if r.err != nil {
		a.cancel(r.err)
	}
	var mem int64 // change in a sorted writer's kept bytes in memory
	if r.rows != nil {
		// A last-run frame's rows: kept, their memory counted with the
		// kept frames' until their output frame is appended.
		if a.ctx.Err() == nil && a.keep != nil {
			if err := a.keepRowsGuarded(r); err != nil {
				a.cancel(err)
				r.rows.release()
			} else {
				mem = r.held
			}
		} else {
			r.rows.release()
		}
	}
	if r.inPlace != nil && a.ctx.Err() == nil {
		if err := a.appendGuarded(r); err != nil {
			a.cancel(err)
		}
		a.fileInDone += r.kept
	}
	if r.buf != nil {
		kept := false
		if a.ctx.Err() == nil {
			var err error
			if a.keep != nil && !r.out {
				mem, kept, err = a.keepGuarded(r)
			} else {
				err = a.appendGuarded(r)
				if a.fileMode {
					a.fileInDone += r.kept
				}
			}
			if err != nil {
				a.cancel(err)
			}
		}
		if !kept {
			bufPool.Put(r.buf)
		}
	}
	a.b.giveBack(r.held, mem)
}

// keepGuarded is keep with a panic turned into its error.
func (a *appender) keepGuarded(r encoded) (mem int64, kept bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = safe.Recovered(v, "keep of a frame of partition %d", r.partition)
		}
	}()
	return a.keep.keep(r)
}

// keepRowsGuarded is keepRows with a panic turned into its error.
func (a *appender) keepRowsGuarded(r encoded) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = safe.Recovered(v, "keep of the rows of a frame of partition %d", r.partition)
		}
	}()
	a.keep.keepRows(r)
	return nil
}

// appendGuarded is appendFrame with a panic turned into its error.
func (a *appender) appendGuarded(r encoded) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = safe.Recovered(v, "append of a frame of partition %d", r.partition)
		}
	}()
	return a.appendFrame(r)
}

// appendFrame puts r's bytes into the stream, in the next object if
// they would take this one past maxObject, and indexes the frame.
func (a *appender) appendFrame(r encoded) error {
	var b []byte
	length, codec := int64(0), ""
	if r.inPlace != nil {
		length, codec = r.inPlace.length, keptCodec(r.inPlace.codec)
	} else {
		b = r.buf.Bytes()
		length, codec = int64(len(b)), frame.CodecName(b)
	}
	if a.objOff > 0 && a.objOff+length > a.maxObject {
		if err := a.endObject(); err != nil {
			return err
		}
	}
	if len(a.frames) == cap(a.frames) {
		// Write reserved the capacity before it flushed this frame.
		a.frames = growTo(a.frames, a.b.reserved())
	}
	crc := frameCRC(r, b)
	a.frames = append(a.frames, entry.Frame{
		Partition: r.partition,
		Object:    a.obj,
		Offset:    a.objOff,
		Length:    length,
		Rows:      r.stats.Rows,
		Bytes:     r.stats.Bytes,
		CRC32C:    crc,
	})
	a.rows += r.stats.Rows
	a.bytes += r.stats.Bytes
	if a.codecs == nil {
		a.codecs = map[string]int{}
	}
	a.codecs[codec]++
	// The object's checksum from the frame's: one pass over its bytes,
	// not two.
	a.objCRC = crc32cCombine(a.objCRC, crc, length)
	a.objOff += length
	if r.inPlace != nil {
		return a.writeInPlace(*r.inPlace)
	}
	waited, err := a.write(b)
	if err == nil && a.auto != nil {
		a.auto.appended(int(r.buf.Len()), waited)
	}
	return err
}

// write appends b to the object's chunks: it emits each chunk once it is
// full and more bytes follow, and takes the next from the sink. It
// reports how long it waited for chunk buffers.
func (a *appender) write(b []byte) (waited time.Duration, err error) {
	if a.fileMode {
		return 0, a.writeFile(b)
	}
	for len(b) > 0 {
		if a.cur != nil && int64(len(a.cur)) == a.chunk {
			// More bytes follow, so the full chunk is not the last one.
			a.part++
			if a.part > store.MaxParts {
				return waited, fmt.Errorf("object %d: more than %d parts of %d bytes", a.obj, store.MaxParts, a.chunk)
			}
			err := a.sink.Emit(a.obj, a.part, a.cur, false)
			a.cur = nil
			if err != nil {
				return waited, err
			}
		}
		if a.cur == nil {
			start := time.Now()
			buf, err := a.sink.Acquire(a.ctx)
			waited += time.Since(start)
			if err != nil {
				return waited, err
			}
			if a.stream != nil {
				if err := a.stream.Begin(a.obj, a.part+1, buf); err != nil {
					return waited, err // the sink has the buffer
				}
			}
			a.cur = buf
		}
		n := min(int64(len(b)), a.chunk-int64(len(a.cur)))
		a.cur = append(a.cur, b[:n]...)
		b = b[n:]
		if a.stream != nil {
			a.stream.Grow(len(a.cur))
		}
	}
	return waited, nil
}

// endObject emits the current object's last chunk and starts the next.
func (a *appender) endObject() error {
	var err error
	switch {
	case a.img != nil:
		err = a.emitSection(true)
		a.img = nil
	case a.cur == nil:
		return nil
	default:
		a.part++
		err = a.sink.Emit(a.obj, a.part, a.cur, true)
		a.cur = nil
	}
	a.objects = append(a.objects, entry.Object{Size: a.objOff, Parts: int(a.part), CRC32C: a.objCRC})
	a.obj++
	a.part, a.objOff, a.objCRC = 0, 0, 0
	return err
}

// dropCurrent releases the chunk being filled to the sink.
func (a *appender) dropCurrent() {
	if a.cur != nil {
		a.sink.Release(a.cur)
		a.cur = nil
	}
}

// frameCRC is the CRC32C of a frame's stored bytes b: taken when it was
// kept, for a frame copied from a sorted writer's run.
func frameCRC(r encoded, b []byte) uint32 {
	if r.crcSet {
		return r.crc
	}
	return store.CRC32C(b)
}

// growTo returns s with capacity c (at least one more than its length).
func growTo[T any](s []T, c int64) []T {
	out := make([]T, len(s), max(c, int64(len(s))+1))
	copy(out, s)
	return out
}
