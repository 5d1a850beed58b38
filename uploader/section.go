package uploader

import (
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/store"
)

// An object whose bytes are written to a local file before they are
// uploaded (a spilling writer's merged object: its bytes are on disk and
// its size is known, about, before its first byte) is uploaded in parts
// sized by the object, not by chunk_size: about Config.Concurrency
// parts, behind a first part of the least size, cut by the chunker for
// every connection to end together (chunker's partSize), so that every
// connection stays busy to the end with few requests, each part's body a
// section of the file. A section
// is replayable: every request, a retry's or a hedge's, reads it again
// from disk, so no part's bytes are held in the pool's memory whatever
// its size, and the file parts take no chunk buffers.

// DefaultMaxPartSize is Config.MaxPartSize when it is 0: a writer's
// object of up to 2 GiB goes in one part when the pool's connections are
// busy with other objects from disk (PlanFileParts with sharing), and a
// part costs no memory however large (its body is a file section). A
// part is sent whole by every request, a retry's too, within
// request_timeout: 2 GiB in the default 5 minutes needs 6.8 MiB/s on
// its connection (a slower link wants a smaller max_part_size).
const DefaultMaxPartSize = 2 << 30

// PlanFileParts is how a pool of cfg cuts a spilled writer's object of
// about size bytes, uploaded from its file while sharing objects from
// disk (this one among them; 1: alone in its pool) upload at once:
// parts in all, the first part's size (0: none of its own), the least
// and most part sizes. key names the object in the error of one too
// large.
//
// The pool's connections are divided among the objects (share: at
// least one each), and the size is split in as many parts, but none
// smaller than Config.ChunkSize (so never more parts than chunks), none
// but the last under least (Config.MinPartSize, S3's 5 MiB), none over
// most (Config.MaxPartSize), and no more than store.MaxParts: an object
// needs many parts only to keep connections busy that no other object
// does, so objects that share the pool take fewer, larger parts with no
// loss of time. An object alone, when that makes two parts or more each
// of at least twice least, takes one more in front of them, the first,
// of least bytes: it leaves as soon as least bytes are merged rather
// than a whole part's worth, and its answer tells the rate a connection
// sends at (Pool.sendRate), from which the parts cut after it are
// sized; the connection that sent it takes the last part, which is that
// much smaller. An object of more than MaxPartSize x store.MaxParts
// bytes is refused with an error naming it, its size and the limit;
// nothing of it is stored, or asked for, then.
func PlanFileParts(cfg Config, key string, size int64, sharing int) (parts int, first, least, most int64, err error) {
	least = cfg.MinPartSize
	if least <= 0 {
		least = store.MinPartSize
	}
	most = cfg.MaxPartSize
	if most <= 0 {
		most = DefaultMaxPartSize
	}
	most = max(most, least)
	if limit := most * store.MaxParts; size > limit {
		return 0, 0, 0, 0, fmt.Errorf("object %s: %d bytes is more than max_part_size (%d bytes) x %d parts = %d bytes: raise max_part_size (at most %d bytes), set max_object_size, or spread the output over more workers",
			key, size, most, store.MaxParts, limit, int64(store.MaxPartSize))
	}
	conc := int64(share(cfg.Concurrency, sharing))
	// Never smaller than a chunk: an object takes no more requests than
	// it would in chunks (with several writers sharing the connections,
	// a split in Concurrency parts each would take more).
	part := max((size+conc-1)/conc, (size+store.MaxParts-1)/store.MaxParts, least, cfg.ChunkSize)
	part = min(part, most)
	parts = int(max((size+part-1)/part, 1))
	if sharing <= 1 && parts >= 2 && parts < store.MaxParts && part >= 2*least {
		parts, first = parts+1, least
	}
	return parts, first, least, most, nil
}

// share is the connections of a pool of concurrency connections that
// each of sharing objects uploading at once may count on: at least one.
func share(concurrency, sharing int) int {
	return max(concurrency/max(sharing, 1), 1)
}

// fileOwner is an upload's file, released once when the upload ends.
type fileOwner struct {
	once    sync.Once
	release func()
}

func (f *fileOwner) done() {
	if f != nil {
		f.once.Do(f.release)
	}
}

// ownFile records the files o's sections are read from: release is
// called once, when the upload is over (completed, or aborted after its
// parts in flight ended).
func (o *Upload) ownFile(release func()) {
	o.mu.Lock()
	o.file = &fileOwner{release: release}
	o.mu.Unlock()
}

// releaseFile releases o's file, if it has one, once no part reads it.
func (o *Upload) releaseFile() {
	o.mu.Lock()
	f := o.file
	o.mu.Unlock()
	f.done()
}

// submitSection hands over part n, a reader of bytes on disk. An
// object of sections is a multipart upload however many parts it has.
func (o *Upload) submitSection(n int32, sec *io.SectionReader, crc uint32, last bool) error {
	o.mu.Lock()
	if err := o.takeLocked(n); err != nil {
		o.mu.Unlock()
		return err
	}
	o.chunks++
	o.ready = append(o.ready, &part{obj: o, n: n, body: body{file: sec, crc: crc}, queued: time.Now()})
	o.wg.Add(1)
	if last {
		// Sealed, never one put and never re-cut: its parts are sized
		// already.
		o.lastLocked(false, false)
	}
	return o.queueUnlock()
}

// sendRate is the bytes per second one connection sends a part at, over
// the parts the pool sent whole lately (a file part's answer among
// them); 0 before the first. The rate of a part in flight is not taken:
// the bytes read from its body fill the socket buffers on the way at
// once, and on a slow link those hold a second's worth or more.
func (p *Pool) sendRate() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate
}

// write appends section s to the object: parts are cut as they fill
// (partLimit), an unchecked section at the part's limit, a checked one
// (a kept frame) before it unless it would take the part past the most a
// part may hold. A section cut in two is read back once to take each
// piece's CRC32C, and checked against its own.
func (d *diskParts) write(o *Object, s chunker.Section) error {
	if o.ended {
		return fmt.Errorf("object %s: %w", o.up.key, errEnded)
	}
	e := extent{file: s.File, off: s.Off, n: s.N, check: s.Check, crc: s.CRC32C, what: s.What}
	for e.n > 0 {
		cur, limit := d.size-d.start, d.partLimit(o.part)
		if cur >= limit || (e.check && cur > 0 && cur+e.n > d.most) {
			if err := d.emit(o, false); err != nil {
				return err
			}
			continue
		}
		room := limit - cur
		if e.check {
			room = d.most - cur
		}
		if e.n <= room {
			d.add(e)
			return nil
		}
		head, tail, err := splitExtent(e, room)
		if err != nil {
			return err
		}
		d.add(head)
		e = tail
	}
	return nil
}

// add appends e to the current part, joined to the extent before it
// when both are unchecked and adjacent in one file.
func (d *diskParts) add(e extent) {
	if k := len(d.exts) - 1; k >= 0 && !e.check && !d.exts[k].check && d.exts[k].file == e.file && d.exts[k].off+d.exts[k].n == e.off {
		d.exts[k].n += e.n
		d.exts[k].crc = store.CombineCRC32C(d.exts[k].crc, e.crc, e.n)
	} else {
		d.exts = append(d.exts, e)
	}
	d.crc = store.CombineCRC32C(d.crc, e.crc, e.n)
	d.size += e.n
}

// splitExtent cuts e after its first n bytes, reading both pieces from
// disk for their CRC32Cs; the whole must match e's.
func splitExtent(e extent, n int64) (head, tail extent, err error) {
	sum := func(off, n int64) (uint32, error) {
		b := make([]byte, min(n, 1<<20))
		var crc uint32
		for done := int64(0); done < n; {
			k := min(int64(len(b)), n-done)
			if err := e.file.ReadAt(b[:k], off+done); err != nil {
				return 0, fmt.Errorf("read %d bytes at %d of spill %s: %w", k, off+done, e.file.Name(), err)
			}
			crc = store.UpdateCRC32C(crc, b[:k])
			done += k
		}
		return crc, nil
	}
	a, err := sum(e.off, n)
	if err != nil {
		return head, tail, err
	}
	b, err := sum(e.off+n, e.n-n)
	if err != nil {
		return head, tail, err
	}
	if got := store.CombineCRC32C(a, b, e.n-n); got != e.crc {
		return head, tail, e.changed(got)
	}
	head, tail = e, e
	head.n, head.crc = n, a
	tail.off, tail.n, tail.crc = e.off+n, e.n-n, b
	return head, tail, nil
}

// partLimit is where the current part (after done parts) is cut. A first
// part planned apart is cut at its size. Each other part is cut as it
// fills, from what is known then (partSize): the object's bytes from the
// part's start on (those written, and the rest of the size first told),
// the parts planned for them, and the ratio of a connection's send rate
// to the merge's rate. The parts planned for the rest are no more than
// the connections this object may count on now, when other objects from
// disk upload at once (share), nor fewer than the most a part may hold
// allows. The last planned part takes the rest, up to the most a part
// may hold.
func (d *diskParts) partLimit(done int32) int64 {
	switch k := int(done) + 1; {
	case k == 1 && d.first > 0 && d.planned > 1:
		return d.first
	case k < d.planned:
		left := max(d.size, d.est) - d.start + d.first
		parts := d.planned - k + 1
		if s := share(d.pool.cfg.Concurrency, int(d.pool.fromDisk.Load())); s < parts {
			parts = max(s, int((left+d.most-1)/d.most))
		}
		size := partSize(left, parts, d.sendRatio())
		return min(max(size, d.least), d.most)
	}
	return d.most
}

// sendRatio is a connection's send rate over the merge's, or 0 while
// either is unknown. The merge's is the rate the last part was written
// at: it falls as the parts handed over take their share of the CPUs,
// and the next part is merged at about the last one's rate, not the
// average since the output began.
func (d *diskParts) sendRatio() float64 {
	send := d.pool.sendRate()
	if send <= 0 || d.mergeRate <= 0 {
		return 0
	}
	return send / d.mergeRate
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

// emit hands over the current part: a reader of its extents. last
// marks the object's final one.
func (d *diskParts) emit(o *Object, last bool) error {
	end := d.size
	o.part++
	if o.part > store.MaxParts {
		return fmt.Errorf("object %s: more than %d parts of at most %d bytes", o.up.key, store.MaxParts, d.most)
	}
	body, err := newPartReader(d.exts)
	if err != nil {
		return err
	}
	crc := d.crc
	now := time.Now()
	if took := now.Sub(d.cut).Seconds(); took > 0 {
		d.mergeRate = float64(end-d.start) / took
	}
	d.start, d.crc, d.cut, d.exts = end, 0, now, nil
	return o.up.submitSection(o.part, io.NewSectionReader(body, 0, body.size), crc, last)
}
