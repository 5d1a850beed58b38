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
// puts encoded frames into the object's byte stream in seq order, writes
// the stream to the objects (Objects) and indexes every frame; a sorted
// writer's appender keeps the writing phase's frames instead (keep) and
// queues the object's frames at its end. It gives each frame's budget
// back once the frame is in.
type appender struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	b      *budget   // to give bytes back, and for the index capacity reserved
	q      *jobQueue // for a sorted writer's output frames
	objs   Objects
	auto   *autoCodec // compression auto: told how long writes to objects waited

	maxObject   int64 // the most an object may take
	partitions  int
	frameTarget int64
	keep        *keeper // a sorted writer's kept frames; nil if not sorted

	// A sorted writer's spilled object goes to the object as sections of
	// spill files (ondisk.go) when spillDir is set (the objects take
	// sections: Objects.Limit(true) > 0): then fileMode, and img is the
	// object's files.
	spillDir *spill.Dir
	fileMode bool
	img      *image
	// maxFileObject is the most an object written from disk may take.
	maxFileObject int64
	// sizeHint is the bytes the next object will be about, when known (a
	// sorted writer's at Close), for Objects.Create.
	sizeHint int64

	cur     Object // the object being written; nil between objects
	obj     int
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
	if r.spilled != nil && a.ctx.Err() == nil && a.keep != nil {
		m, err := a.keepSpilledGuarded(r)
		if err != nil {
			a.cancel(err)
		}
		mem = m
	}
	if r.inPlace != nil && a.ctx.Err() == nil {
		if err := a.appendGuarded(r); err != nil {
			a.cancel(err)
		}
	}
	if r.buf != nil {
		kept := false
		if a.ctx.Err() == nil {
			var err error
			if a.keep != nil && !r.out {
				mem, kept, err = a.keepGuarded(r)
			} else {
				err = a.appendGuarded(r)
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

// keepSpilledGuarded is keepSpilled with a panic turned into its error.
func (a *appender) keepSpilledGuarded(r encoded) (mem int64, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = safe.Recovered(v, "keep of a piece of partition %d", r.partition)
		}
	}()
	return a.keep.keepSpilled(r)
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

// write appends b to the current object, starting it if need be, and
// reports how long the write took: the time it waited for the pool's
// buffers, for compression auto.
func (a *appender) write(b []byte) (waited time.Duration, err error) {
	if a.fileMode {
		return 0, a.writeFile(b)
	}
	if a.cur == nil {
		obj, err := a.objs.Create(a.sizeHint, false, nil)
		if err != nil {
			return 0, fmt.Errorf("create object %d: %w", a.obj, err)
		}
		a.cur = obj
	}
	start := time.Now()
	err = a.cur.Write(b)
	return time.Since(start), err
}

// endObject finishes the current object, if any, and starts the next.
func (a *appender) endObject() error {
	if a.cur == nil {
		a.img = nil
		return nil
	}
	err := a.cur.Finish()
	a.cur, a.img = nil, nil
	a.objects = append(a.objects, entry.Object{Size: a.objOff, CRC32C: a.objCRC})
	a.obj++
	a.sizeHint = max(a.sizeHint-a.objOff, 0)
	a.objOff, a.objCRC = 0, 0
	return err
}

// dropCurrent aborts the object being written.
func (a *appender) dropCurrent() {
	if a.cur != nil {
		a.cur.Abort()
		a.cur, a.img = nil, nil
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
