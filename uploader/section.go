package uploader

import (
	"fmt"
	"io"
	"sync"
	"time"

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

// DefaultMaxPartSize is Config.MaxPartSize when it is 0.
const DefaultMaxPartSize = 512 << 20

// FileParts reports whether the sink takes an object's parts as sections
// of a file (PlanParts, OwnFile, EmitSection): no Keeper wants the
// object's chunks kept in memory.
func (s *Sink) FileParts() bool { return s.opt.Keeper == nil }

// PlanParts says how object obj, whose bytes will be about size,
// uploaded from a file, is cut: size split in Config.Concurrency parts
// but none smaller than Config.ChunkSize (so never more parts than
// chunks), none but the last under least (Config.MinPartSize, S3's
// 5 MiB), none over most (Config.MaxPartSize), and no more than
// store.MaxParts; and, when that makes two parts or more each of at
// least twice least, one more in front of them, the first, of least
// bytes (first; 0 when there is none). The first part leaves as soon as
// least bytes are merged rather than a whole part's worth, and its
// answer tells the rate a connection sends at (SendRate), from which the
// parts cut after it are sized; the connection that sent it takes the
// last part, which is that much smaller. An object of more than
// MaxPartSize x store.MaxParts bytes is refused with an error naming it,
// its size and the limit; nothing of it is stored, or asked for, then.
func (s *Sink) PlanParts(obj int, size int64) (parts int, first, least, most int64, err error) {
	o := s.object(obj)
	if parts, first, least, most, err = PlanFileParts(s.pool.cfg, o.key, size); err == nil {
		// Its sections will be a multipart upload however many they are:
		// created now, while the first part's bytes are merged, so that
		// the part leaves as soon as they are on disk.
		o.createEarly()
	}
	return parts, first, least, most, err
}

// SendRate is the bytes per second one connection sends a part at, over
// the parts the pool sent whole lately (a file part's answer among
// them); 0 before the first. The rate of a part in flight is not taken:
// the bytes read from its body fill the socket buffers on the way at
// once, and on a slow link those hold a second's worth or more.
func (s *Sink) SendRate() float64 { return s.pool.sendRate() }

// PlanFileParts is how a pool of cfg cuts a spilled writer's object of
// about size bytes, uploaded from its file (Sink.PlanParts): parts in
// all, the first part's size (0: none of its own), the least and most
// part sizes. key names the object in the error of one too large.
func PlanFileParts(cfg Config, key string, size int64) (parts int, first, least, most int64, err error) {
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
	conc := int64(max(cfg.Concurrency, 1))
	// Never smaller than a chunk: an object takes no more requests than
	// it would in chunks (with several writers sharing the connections,
	// a split in Concurrency parts each would take more).
	part := max((size+conc-1)/conc, (size+store.MaxParts-1)/store.MaxParts, least, cfg.ChunkSize)
	part = min(part, most)
	parts = int(max((size+part-1)/part, 1))
	if parts >= 2 && parts < store.MaxParts && part >= 2*least {
		parts, first = parts+1, least
	}
	return parts, first, least, most, nil
}

// OwnFile gives object obj the files its sections are read from: release
// is called once, when the upload is over (completed, or aborted after
// its parts in flight ended), and not before, so that the caller lets go
// of the files only then. The caller hands the file over before its first
// section, and never uses release itself once it has.
func (s *Sink) OwnFile(obj int, release func()) { s.object(obj).ownFile(release) }

// EmitSection hands over part (1-based, ascending) of object obj: body,
// a reader of bytes complete on disk (each request reads it again), whose
// CRC32C is crc. last marks the object's final part. It does not block; it fails with
// the object's failure, or when the object takes no more parts.
func (s *Sink) EmitSection(obj int, part int32, body *io.SectionReader, crc uint32, last bool) error {
	return s.object(obj).submitSection(part, body, crc, last)
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

// ownFile records the file o's sections are read from (see Sink.OwnFile).
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

// sendRate is Sink.SendRate.
func (p *Pool) sendRate() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate
}
