package chunker

import (
	"fmt"
	"sync"

	"github.com/durashuffle/durashuffle/internal/spill"
	"github.com/durashuffle/durashuffle/store"
)

// A sorted writer whose runs spilled never writes its object whole in
// memory: the frames it takes as they are stay in its runs' file, and
// the frames merged at Close go to a file of the object's own in its
// spill directory (both counted against the spill limit). It hands the
// object each section as soon as its bytes are on disk
// (Object.WriteSection), so that the uploads overlap the merge; how the
// sections are cut into parts is the uploader's.

// image is the files of the object being written from disk: the frames
// merged at Close appended to the object's own file, and the kept frames
// copied as they are left where they are, in the writer's spill file.
type image struct {
	file *spill.File // the object's own bytes
	// run is the writer's spill file, which the object holds from its
	// first frame taken in place until the object lets go of it
	// (released): an object with none leaves the runs' file to be removed
	// at Close.
	run      *sharedFile
	runMu    sync.Mutex
	runHeld  bool
	released bool
}

// toFile says whether a sorted writer's object, of about est stored
// bytes, goes to the object from disk: its runs spilled (its output is
// more than coalesce_budget and its bytes are on disk already), the
// objects take sections, and the spill directory has room for the object
// as well as the runs (at most the frames merged at Close are written).
// Otherwise it goes from memory as any object.
func (a *appender) toFile(est int64) bool {
	return a.spillDir != nil && a.keep.spilled > 0 && a.spillDir.Room() >= est
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

// writeFile appends b, bytes merged at Close, to the object's own file,
// starting the object on its first bytes, and hands them to the object
// as a section of the file.
func (a *appender) writeFile(b []byte) error {
	img, err := a.startImage()
	if err != nil {
		return err
	}
	off, err := img.file.Append(b)
	if err != nil {
		return err
	}
	return a.cur.WriteSection(Section{File: img.file, Off: off, N: int64(len(b)), CRC32C: store.CRC32C(b)})
}

// writeInPlace appends kept frame k, complete in the writer's spill file,
// to the object as a section of that file: its bytes are neither read
// nor written again here, and each request that reads them checks them
// against k's CRC32C.
func (a *appender) writeInPlace(k keptFrame) error {
	img, err := a.startImage()
	if err != nil {
		return err
	}
	img.runMu.Lock()
	if !img.runHeld && !img.released {
		img.run.hold()
		img.runHeld = true
	}
	img.runMu.Unlock()
	return a.cur.WriteSection(Section{File: a.keep.file, Off: k.off, N: k.length, CRC32C: k.crc, Check: true,
		What: fmt.Sprintf("frame of partition %d", k.partition)})
}

// startImage starts the object written from disk on its first bytes,
// and returns its files.
func (a *appender) startImage() (*image, error) {
	if a.img != nil {
		return a.img, nil
	}
	img := &image{file: a.spillDir.Create(), run: a.keep.share()}
	obj, err := a.objs.Create(min(a.sizeHint, a.maxObject), true, func() {
		img.file.Remove()
		img.runMu.Lock()
		img.released = true
		held := img.runHeld
		img.runMu.Unlock()
		if held {
			img.run.drop()
		}
	})
	if err != nil {
		img.file.Remove()
		return nil, fmt.Errorf("create object %d: %w", a.obj, err)
	}
	a.img, a.cur = img, obj
	return img, nil
}
