package chunker

import (
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// FileSink is a Sink that can take a sorted writer's object as sections
// of files rather than as chunks: the parts are sized by the object
// (PlanParts) and read from disk by every request, so their size costs
// no memory. A sorted writer whose runs spilled never writes its object
// whole: the frames it takes as they are stay in its runs' file, and the
// frames merged at Close go to a file of the object's own in its spill
// directory (both counted against the spill limit). It hands each part
// over, a reader of its extents in those files, as soon as its bytes are
// on disk, so that the uploads overlap the merge. Its methods come from
// the Sink's one goroutine, like Emit.
type FileSink interface {
	Sink
	// FileParts reports whether the sink takes file sections now.
	FileParts() bool
	// PlanParts says how object obj, of about size bytes, is to be cut:
	// in about parts parts, the first of first bytes when first is not
	// 0, none but the last under least bytes, none over most. It fails
	// when the object cannot be stored in parts (too large); then nothing
	// of it is handed over.
	PlanParts(obj int, size int64) (parts int, first, least, most int64, err error)
	// OwnFile hands object obj's files to the sink: release lets go of
	// them (each is removed once nothing holds it), and the sink calls it
	// once no part of the object will read them. Called before the
	// object's first section.
	OwnFile(obj int, release func())
	// EmitSection hands over part (1-based, ascending) of object obj: a
	// reader of its bytes, which are on disk, with CRC32C crc, for any
	// number of requests; last marks the object's final part. An error
	// fails the writer.
	EmitSection(obj int, part int32, body *io.SectionReader, crc uint32, last bool) error
	// SendRate is the bytes per second one connection sends a part at,
	// as measured so far; 0 while unknown.
	SendRate() float64
}

// image is the object being written to files, part by part: its bytes
// are extents of spill files, the frames merged at Close appended to
// the object's own file, and the kept frames copied as they are left
// where they are, in the writer's spill file.
type image struct {
	file *spill.File // the object's own bytes
	// run is the writer's spill file, which the object holds from its
	// first frame taken in place until the sink lets go of it (released):
	// an object with none leaves the runs' file to be removed at Close.
	run         *sharedFile
	runMu       sync.Mutex
	runHeld     bool
	released    bool
	planned     int   // parts planned
	first       int64 // the first part's size when it is planned apart; 0 if not
	least, most int64 // the smallest part but the last, the largest
	size        int64 // the object's bytes so far
	start       int64 // the current part's first byte
	crc         uint32
	exts        []extent // the current part's bytes
	// cut is when the last part was handed over (the object's first
	// bytes before any), and mergeRate the bytes per second its bytes
	// were written at (0 before any).
	cut       time.Time
	mergeRate float64
}

// extent is bytes of a part in a spill file. A kept frame copied in
// place is one extent of its own, checked against the CRC32C taken when
// it was kept (check) as a request reads it.
type extent struct {
	file      *spill.File
	off, n    int64
	check     bool
	crc       uint32
	partition int // a checked one's, for its error
}

// toFile says whether a sorted writer's object goes to files: its runs
// spilled (its output is more than coalesce_budget and its bytes are on
// disk already), the sink takes file sections, and the spill directory
// has room for the object as well as the runs (at most the frames merged
// at Close are written), and the object is more
// than one chunk (one that fits a chunk is one put, or the upload already
// prepared for it, fewer requests than a multipart upload of one part).
// Otherwise it goes to chunks as any object.
func (a *appender) toFile(est int64) bool {
	return a.files != nil && a.keep.spilled > 0 && est > a.chunk && a.files.FileParts() && a.spillDir.Room() >= est
}

// estimateStored is about the stored bytes of the object the kept frames
// make: a frame kept compressed keeps its length; a raw one (compressed
// only at Close) counts its logical bytes at the compression ratio of the
// compressed ones, or its length when there are none.
func (k *keeper) estimateStored() int64 {
	var comp, compLogical, raw, rawLogical int64
	for _, f := range k.kept {
		if f.raw {
			raw += f.length
			rawLogical += f.bytes
		} else {
			comp += f.length
			compLogical += f.bytes
		}
	}
	if raw == 0 || comp == 0 || compLogical == 0 {
		return comp + raw
	}
	return comp + int64(float64(rawLogical)*float64(comp)/float64(compLogical))
}

// outputLeft is about the stored bytes still to come: the kept bytes
// not yet merged, at the ratio of stored to kept bytes of the frames
// appended so far (a frame kept raw is compressed only now), or the
// first estimate's rest before any.
func (a *appender) outputLeft() int64 {
	if a.fileInDone == 0 || a.fileOutDone == 0 {
		return max(a.fileEst-a.fileOutDone, 0)
	}
	return int64(float64(a.fileIn-a.fileInDone) * float64(a.fileOutDone) / float64(a.fileInDone))
}

// writeFile appends b, bytes merged at Close, to the object's own file,
// starting the object's image (and planning its parts) on its first
// bytes, and hands over each part once it is full (partLimit) and more
// bytes follow: parts come out the right size however far the first
// estimate was off. The first part's connection takes the last part, so
// the two count as one share: the last part is the first's size smaller
// than the others.
func (a *appender) writeFile(b []byte) error {
	img, err := a.startImage(int64(len(b)))
	if err != nil {
		return err
	}
	for len(b) > 0 {
		cur, limit := img.size-img.start, a.partLimit()
		if cur >= limit {
			if err := a.emitSection(false); err != nil {
				return err
			}
			continue
		}
		n := min(int64(len(b)), limit-cur)
		off, err := img.file.Append(b[:n])
		if err != nil {
			return err
		}
		if k := len(img.exts) - 1; k >= 0 && img.exts[k].file == img.file && !img.exts[k].check && img.exts[k].off+img.exts[k].n == off {
			img.exts[k].n += n
		} else {
			img.exts = append(img.exts, extent{file: img.file, off: off, n: n})
		}
		img.crc = store.UpdateCRC32C(img.crc, b[:n])
		img.size += n
		a.fileOutDone += n
		b = b[n:]
	}
	return nil
}

// writeInPlace appends kept frame k, complete in the writer's spill file,
// to the object as an extent of that file: its bytes are neither read
// nor written again, and each request of its part reads them from the
// spill, checked against k's CRC32C. Parts are cut between frames: a
// part holds the frame whole unless that takes it past the most a part
// may hold, and then the frame is read back (checked) and cut as bytes
// merged at Close are.
func (a *appender) writeInPlace(k keptFrame) error {
	img, err := a.startImage(k.length)
	if err != nil {
		return err
	}
	if img.size-img.start >= a.partLimit() {
		if err := a.emitSection(false); err != nil {
			return err
		}
	}
	if img.size-img.start+k.length > img.most {
		buf, err := pieceBytes(a.keep.file, k)
		if err != nil {
			return err
		}
		defer bufPool.Put(buf)
		return a.writeFile(buf.Bytes())
	}
	img.runMu.Lock()
	if !img.runHeld && !img.released {
		img.run.hold()
		img.runHeld = true
	}
	img.runMu.Unlock()
	img.exts = append(img.exts, extent{file: a.keep.file, off: k.off, n: k.length, check: true, crc: k.crc, partition: k.partition})
	img.crc = crc32cCombine(img.crc, k.crc, k.length)
	img.size += k.length
	a.fileOutDone += k.length
	return nil
}

// startImage starts the object's image on its first n bytes, planning
// its parts, and returns it.
func (a *appender) startImage(n int64) (*image, error) {
	if a.img != nil {
		return a.img, nil
	}
	est := min(max(a.outputLeft(), n), a.maxObject)
	parts, first, least, most, err := a.files.PlanParts(a.obj, est)
	if err != nil {
		return nil, err
	}
	img := &image{file: a.spillDir.Create(), run: a.keep.share(), planned: max(parts, 1), first: first, least: least, most: most, cut: time.Now()}
	a.files.OwnFile(a.obj, func() {
		img.file.Remove()
		img.runMu.Lock()
		img.released = true
		held := img.runHeld
		img.runMu.Unlock()
		if held {
			img.run.drop()
		}
	})
	a.img = img
	return img, nil
}

// partLimit is where the current part is cut. A first part planned apart
// is cut at its size. Each other part is cut as it fills, from what is
// known then (partSize): the object's bytes from the part's start on
// (those written and outputLeft's estimate of those to come), the parts
// planned for them, and the ratio of a connection's send rate to the
// merge's rate. The last planned part takes the rest, up to the most a
// part may hold.
func (a *appender) partLimit() int64 {
	img := a.img
	switch k := int(a.part) + 1; {
	case k == 1 && img.first > 0 && img.planned > 1:
		return img.first
	case k < img.planned:
		total := img.size + min(a.outputLeft(), a.maxObject-img.size)
		size := partSize(total-img.start+img.first, img.planned-k+1, a.sendRatio())
		return min(max(size, img.least), img.most)
	}
	return img.most
}

// sendRatio is a connection's send rate over the merge's, or 0 while
// either is unknown. The merge's is the rate the last part was written
// at: it falls as the parts handed over take their share of the CPUs,
// and the next part is merged at about the last one's rate, not the
// average since the output began.
func (a *appender) sendRatio() float64 {
	send := a.files.SendRate()
	if send <= 0 || a.img.mergeRate <= 0 {
		return 0
	}
	return send / a.img.mergeRate
}

// partSize is the size of the next of parts parts that carry left bytes,
// each part handed over once its bytes are merged and sent on a
// connection of its own, when a connection sends r times as fast as the
// merge writes (r is 0 when unknown). A part handed over later starts
// later, so for all of them to end together each is 1 + r times the
// next: the next part, merged in s / merge rate, leaves the one after it
// that much less time, r x s fewer bytes. The first of parts is then
// left x r / ((1 + r) - (1 + r)^(1 - parts)); with r near 0 (a merge far
// faster than a connection), left / parts, equal parts; with r near 1 or
// more (a merge no faster than a connection) the parts halve and the
// last is small, so that little is left to send once the merge ends.
func partSize(left int64, parts int, r float64) int64 {
	if parts <= 1 || left <= 0 {
		return max(left, 0)
	}
	if r < 1e-6 {
		return (left + int64(parts) - 1) / int64(parts)
	}
	den := (1 + r) - math.Pow(1+r, float64(1-parts))
	return int64(math.Ceil(float64(left) * r / den))
}

// emitSection hands over the current part of the file's object: a
// reader of its extents.
func (a *appender) emitSection(last bool) error {
	img := a.img
	end := img.size
	a.part++
	if a.part > store.MaxParts {
		return fmt.Errorf("object %d: more than %d parts of at most %d bytes", a.obj, store.MaxParts, img.most)
	}
	body, err := newPartReader(img.exts)
	if err != nil {
		return err
	}
	crc := img.crc
	now := time.Now()
	if took := now.Sub(img.cut).Seconds(); took > 0 {
		img.mergeRate = float64(end-img.start) / took
	}
	img.start, img.crc, img.cut, img.exts = end, 0, now, nil
	return a.files.EmitSection(a.obj, a.part, io.NewSectionReader(body, 0, body.size), crc, last)
}
