package spill

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// ErrLimit marks a writer that needed more spill than the process's
// limit (spill_bytes) had left.
var ErrLimit = errors.New("spill limit reached")

// prefix starts the name of every process directory under Dir's root.
const prefix = "durashuffle-spill-"

// Dir is one process's spill directory. Safe for concurrent use.
type Dir struct {
	root  string // the configured directory
	path  string // root/durashuffle-spill-{pid}-{random}: this process's
	limit int64
	lock  *os.File // held (flock) while the process runs

	mu     sync.Mutex
	used   int64
	closed bool
	files  int
}

// Open creates this process's spill directory under root (made if
// missing) with a limit of limit bytes across its files, and removes the
// directories of processes that are gone (their lock is free). It fails
// with an error naming root when root cannot be written.
func Open(root string, limit int64) (*Dir, error) {
	if root == "" {
		return nil, errors.New("spill: no directory")
	}
	if limit < 1 {
		return nil, fmt.Errorf("spill: limit must be positive, got %d bytes", limit)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("spill directory %s (spill_dir): %w", root, err)
	}
	RemoveDead(root)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	// Made and locked under a name RemoveDead passes over, then renamed:
	// no other process ever sees it unlocked (the lock is on the open
	// file, which the rename keeps).
	tmp := filepath.Join(root, ".new-"+name)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("spill directory %s (spill_dir): %w", root, err)
	}
	lock, err := lockDir(tmp)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("spill directory %s (spill_dir): lock %s: %w", root, tmp, err)
	}
	path := filepath.Join(root, prefix+name)
	if err := os.Rename(tmp, path); err != nil {
		lock.Close()
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("spill directory %s (spill_dir): %w", root, err)
	}
	return &Dir{root: root, path: path, limit: limit, lock: lock}, nil
}

// RemoveDead removes the process directories under root whose process
// is gone: their lock can be taken. It returns how many it removed.
// Directories of running processes, and anything not named like a
// process directory, are left alone.
func RemoveDead(root string) int {
	ents, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(root, e.Name())
		if lock, err := tryLock(p); err == nil {
			if os.RemoveAll(p) == nil {
				n++
			}
			lock.Close()
		}
	}
	return n
}

// Path is this process's directory.
func (d *Dir) Path() string { return d.path }

// Root is the configured directory.
func (d *Dir) Root() string { return d.root }

// Limit is the byte limit across the process's files.
func (d *Dir) Limit() int64 { return d.limit }

// Used is the bytes the process's files hold now.
func (d *Dir) Used() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used
}

// Close removes the directory and every file in it. Files still open
// fail their next write.
func (d *Dir) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	err := os.RemoveAll(d.path)
	d.lock.Close()
	return err
}

// reserve counts n more bytes against the limit.
func (d *Dir) reserve(n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("spill directory %s is closed", d.path)
	}
	if d.used+n > d.limit {
		return fmt.Errorf("%w: a writer needs %d more bytes in %s, where this process's writers hold %d bytes of its %d-byte limit (spill_bytes): raise spill_bytes, give spill_dir more room, or spread the output over more workers",
			ErrLimit, n, d.root, d.used, d.limit)
	}
	d.used += n
	return nil
}

func (d *Dir) unreserve(n int64) {
	d.mu.Lock()
	d.used -= n
	d.mu.Unlock()
}

// File is one writer's spill: bytes appended at its end and read back at
// any offset. Its methods are safe for concurrent use: appends take the
// file in turn, each holding it while it writes; a read (ReadAt, a
// Section) is of bytes an append wrote already, and takes the file only
// to learn its size (waiting for an append under way), not while it
// reads.
type File struct {
	d     *Dir
	sized bool // made by CreateSized: written in place, not appended

	mu   sync.Mutex
	f    *os.File
	wr   io.WriterAt // f; tests put a full disk here
	size int64
	gone bool // removed: appends fail rather than make it again
}

// open returns the file and its size, under the lock.
func (f *File) open() (*os.File, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.f, f.size
}

// Create opens a new, empty file in the directory. Nothing touches the
// disk until the first Append.
func (d *Dir) Create() *File { return &File{d: d} }

// CreateSized opens a new file of size bytes, counted against the limit
// at once, to be written at any offset (WriteAt) rather than appended:
// an object laid out before its bytes arrive (a combine task's). It
// fails with ErrLimit, naming the bytes and the limit, when the limit
// has no room for it, and naming the file when the disk refuses.
func (d *Dir) CreateSized(size int64, what string) (*File, error) {
	if err := d.reserve(size); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	d.mu.Lock()
	d.files++
	name := filepath.Join(d.path, fmt.Sprintf("object-%d.spill", d.files))
	d.mu.Unlock()
	fh, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		if err = fh.Truncate(size); err != nil {
			fh.Close()
			os.Remove(name)
		}
	}
	if err != nil {
		d.unreserve(size)
		return nil, fmt.Errorf("%s: %d bytes in %s (spill_dir %s): %w", what, size, name, d.root, err)
	}
	return &File{d: d, f: fh, wr: fh, size: size, sized: true}, nil
}

// WriteAt writes b at off of a file made by CreateSized, within its
// size; safe for concurrent use at disjoint offsets. A write the disk
// refuses (full: the file's blocks are taken as they are written) fails
// naming the file, the bytes and spill_dir.
func (f *File) WriteAt(b []byte, off int64) (int, error) {
	if !f.sized || f.f == nil || off < 0 || off+int64(len(b)) > f.size {
		return 0, fmt.Errorf("write %d bytes at %d of spill %s: it is a file of %d bytes made to be written in place", len(b), off, f.Name(), f.size)
	}
	n, err := f.wr.WriteAt(b, off)
	if err != nil {
		return n, fmt.Errorf("spill %d bytes to %s at offset %d (spill_dir %s): %w", len(b), f.f.Name(), off, f.d.root, err)
	}
	return n, nil
}

// Name is the file's path ("" before the first Append).
func (f *File) Name() string {
	if fh, _ := f.open(); fh != nil {
		return fh.Name()
	}
	return ""
}

// Size is the bytes appended so far.
func (f *File) Size() int64 {
	_, size := f.open()
	return size
}

// Append writes b at the end of the file and returns its offset. It
// fails, naming the file, the bytes and the limit, when the process's
// limit would be passed or the disk refuses (full, removed).
func (f *File) Append(b []byte) (int64, error) {
	return f.append(int64(len(b)), func(off int64) error {
		_, err := f.wr.WriteAt(b, off)
		return err
	})
}

// AppendVec is Append of bufs' n bytes, back to back, in vectored writes
// that copy none of them (pwritev, of up to 1,024 slices each, where the
// system has it; elsewhere a write per slice). bufs (the slice, not the
// bytes) is the file's to change.
func (f *File) AppendVec(bufs [][]byte, n int64) (int64, error) {
	return f.append(n, func(off int64) error { return writeVec(f.wr, bufs, off) })
}

// writeEach writes bufs back to back at off of w, one write each.
func writeEach(w io.WriterAt, bufs [][]byte, off int64) error {
	for _, b := range bufs {
		if _, err := w.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}

// append writes n bytes at the end of the file with write.
func (f *File) append(n int64, write func(off int64) error) (int64, error) {
	if f.sized {
		return 0, fmt.Errorf("append to spill %s: a file of %d bytes made to be written in place", f.Name(), f.Size())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return 0, fmt.Errorf("append %d bytes to a spill file in %s (spill_dir %s): the file was removed", n, f.d.path, f.d.root)
	}
	if err := f.d.reserve(n); err != nil {
		return 0, err
	}
	if f.f == nil {
		d := f.d
		d.mu.Lock()
		d.files++
		name := filepath.Join(d.path, fmt.Sprintf("run-%d.spill", d.files))
		d.mu.Unlock()
		fh, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			f.d.unreserve(n)
			return 0, fmt.Errorf("spill to %s (spill_dir %s): %w", name, d.root, err)
		}
		f.f, f.wr = fh, fh
	}
	off := f.size
	if err := write(off); err != nil {
		f.d.unreserve(n)
		return 0, fmt.Errorf("spill %d bytes to %s at offset %d (spill_dir %s, %d of %d bytes used): %w",
			n, f.f.Name(), off, f.d.root, f.d.Used(), f.d.limit, err)
	}
	f.size += n
	return off, nil
}

// ReadAt reads len(b) bytes at off.
func (f *File) ReadAt(b []byte, off int64) error {
	fh, size := f.open()
	if fh == nil || off+int64(len(b)) > size {
		return fmt.Errorf("read %d bytes at %d of spill %s: it holds %d bytes", len(b), off, f.Name(), size)
	}
	if _, err := fh.ReadAt(b, off); err != nil {
		return fmt.Errorf("read %d bytes at %d of spill %s: %w", len(b), off, fh.Name(), err)
	}
	return nil
}

// Section returns a reader of the n bytes at off, which Append wrote
// already. Its reads, from any goroutine, may run while Append writes
// past off+n, and each reads the disk again: a section holds no bytes of
// its own. It fails once the file is removed.
func (f *File) Section(off, n int64) (*io.SectionReader, error) {
	fh, size := f.open()
	if fh == nil || off < 0 || n < 0 || off+n > size {
		return nil, fmt.Errorf("section of %d bytes at %d of spill %s: it holds %d bytes", n, off, f.Name(), size)
	}
	return io.NewSectionReader(fh, off, n), nil
}

// Room is the bytes the process's files may still take (spill_bytes less
// what they hold).
func (d *Dir) Room() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.limit - d.used
}

// Remove deletes the file and gives its bytes back to the limit.
// Idempotent.
func (f *File) Remove() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gone = true
	if f.f != nil {
		name := f.f.Name()
		f.f.Close()
		os.Remove(name)
		f.f = nil
	}
	if f.size > 0 {
		f.d.unreserve(f.size)
		f.size = 0
	}
}
