package manifest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/uploader"
)

// Seal's memory bounds. Phase 1 keeps, per worker, its header and the
// offset table sampled every k partitions, with k chosen so the samples
// of all workers fit sealTableBytes; phase 2 holds one block of entries
// (all workers' entries of a run of partitions) of about sealBlockBytes,
// plus one part of the index upload (sealPartBytes). A single run of k
// partitions with more entries than sealBlockBytes is a block of its
// own, so a stage with one enormous partition can exceed it.
const (
	sealBlockBytes = 64 << 20
	sealTableBytes = 16 << 20
	sealPartBytes  = 8 << 20
	// sealFetches is the ranged GETs of worker manifests in flight.
	sealFetches = 16
	// MaxSealWorkers bounds the workers of one seal. A seal makes one
	// GET per worker for their manifests' heads and keeps every worker's
	// header (its objects and schema) until the stage manifest is
	// written; past this, the stage would be better split.
	MaxSealWorkers = 100_000
	// sealListed is how many of the workers without a manifest the
	// error names; it counts the rest.
	sealListed = 32
)

// ErrTooManyWorkers: a seal was asked for more than MaxSealWorkers
// workers. Invalid input: nothing was read.
var ErrTooManyWorkers = errors.New("too many workers")

// sealWorker is what phase 1 keeps of one worker manifest.
type sealWorker struct {
	key     string
	w       *Worker
	head    *workerHead // without its offset table: for the entries' checksums
	entries int64       // offset of the entries in the object
	stride  int         // k
	samples []uint32    // offset table at partitions 0, k, 2k, ..., and P
}

// Seal merges the manifests of the given workers into the stage's index
// and manifest. It fails naming the workers that have not committed.
// Sealing again with the same committed attempts is a no-op that returns
// the stage; a stage sealed differently is ErrSealConflict. So is sealing
// a stage whose manifest is a second level's (a combined level, package
// combine) made from these workers and attempts: it returns that level
// and writes nothing, and it does so by the workers' IDs alone once all
// their manifests are gone (gc deletes a combined stage's first level),
// for one GET more.
//
// At most MaxSealWorkers workers (ErrTooManyWorkers, before any request).
// It makes one GET per worker for the manifest heads, so a seal of W
// workers of which few committed costs W GETs and no more; it stops
// starting requests as soon as ctx ends.
//
// It runs in bounded memory, whatever the stage's size (see
// sealBlockBytes): it reads each worker manifest's head (header and
// offset table), then walks the partitions in blocks, fetching every
// worker's entries of a block by ranged GET, merging them in (partition,
// worker, write) order and streaming the index object out as a multipart
// upload (one Put when it is at most sealPartBytes). The index is written under a fresh
// name first; the stage manifest, written with If-None-Match: *, is the
// commit point. A seal that loses that race deletes its index.
func Seal(ctx context.Context, st store.Store, l Layout, query string, stage int, workers []string) (*Stage, error) {
	if len(workers) == 0 {
		return nil, fmt.Errorf("seal %s stage %d: no workers given", query, stage)
	}
	if len(workers) > MaxSealWorkers {
		return nil, fmt.Errorf("%w: seal %s stage %d: %d workers, at most %d (MaxSealWorkers)", ErrTooManyWorkers, query, stage, len(workers), MaxSealWorkers)
	}
	for _, id := range workers {
		if err := ValidateID("worker", id); err != nil {
			return nil, err
		}
	}
	ids := slices.Clone(workers)
	slices.SortFunc(ids, compareWorkers)
	ids = slices.Compact(ids)
	ws, err := sealHeads(ctx, st, l, query, stage, ids, func(id string) string { return l.WorkerManifestKey(query, stage, id) })
	if me := (*missingError)(nil); errors.As(err, &me) && me.missing == me.of {
		// None committed: the stage may be combined and its first level
		// gone (gc deletes every worker manifest of it), and the combined
		// level's record of it answers. A seal with some workers
		// committed costs no GET more than it did.
		if old, lerr := LoadStageManifest(ctx, st, l, query, stage); lerr == nil && old.Combines != nil && old.Combines.sameIDs(ids) {
			return old, nil
		}
	}
	if err != nil {
		return nil, err
	}
	s := &Stage{FormatVersion: FormatVersion, Kind: kindStage, Query: query, Stage: stage,
		Partitions: ws[0].w.Partitions, Schema: ws[0].w.Schema, Results: ws[0].w.Results}
	for _, w := range ws {
		if w.w.Partitions != s.Partitions {
			return nil, fmt.Errorf("%w: %s stage %d: worker %s has %d partitions, worker %s has %d", ErrCorrupt, query, stage, w.w.Worker, w.w.Partitions, ws[0].w.Worker, s.Partitions)
		}
		if string(w.w.Schema) != string(s.Schema) {
			return nil, fmt.Errorf("%w: %s stage %d: worker %s wrote a different schema than worker %s", ErrCorrupt, query, stage, w.w.Worker, ws[0].w.Worker)
		}
		if err := SameEncryption(ws[0].w, w.w); err != nil {
			return nil, fmt.Errorf("seal %s stage %d: %w", query, stage, err)
		}
		s.Workers = append(s.Workers, *w.w)
		s.Totals.add(w.w.Totals)
	}
	if int64(s.Totals.Frames) > math.MaxUint32 {
		return nil, fmt.Errorf("seal %s stage %d: %d frames, an index holds at most %d", query, stage, s.Totals.Frames, uint32(math.MaxUint32))
	}
	// Already sealed? Then nothing is built: the answer is the old stage,
	// or a conflict.
	if old, err := LoadStageManifest(ctx, st, l, query, stage); err == nil {
		return sealedAgain(old, s)
	} else if !store.IsNotFound(err) {
		return nil, err
	}

	sealID := newSealID()
	rel := IndexName(sealID)
	key := l.ObjectKey(query, stage, rel)
	x, err := writeIndex(ctx, st, key, s, ws)
	if err != nil {
		return nil, err
	}
	x.Key = rel
	s.Index = x
	s.SealedAt = time.Now().UTC()
	b, err := s.Encode()
	if err != nil {
		return nil, err
	}
	mkey := l.StageManifestKey(query, stage)
	if err := st.Put(ctx, mkey, b, store.PutOptions{IfNoneMatch: true, ContentType: "application/json"}); err != nil {
		return putLost(ctx, st, l, s, key, err)
	}
	s.Sealed = true
	s.encoded = len(b)
	return s, nil
}

// putLost is the answer to a seal whose stage manifest put failed with
// perr, its index already written at indexKey. The manifest that stands
// decides: this seal's own (a put whose answer was lost, then refused on
// retry because it had landed) is the sealed stage, index kept; another
// seal's is sealedAgain, this index deleted. The index is deleted only
// when no manifest can name it: a put refused before it was stored, or
// taken by another seal. When the outcome cannot be learnt the index
// stays (the manifest may name it; gc removes it if it does not).
func putLost(ctx context.Context, st store.Store, l Layout, s *Stage, indexKey string, perr error) (*Stage, error) {
	mkey := l.StageManifestKey(s.Query, s.Stage)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
	defer cancel()
	deleteIndex := func(err error) error {
		if derr := st.Delete(rctx, indexKey); derr != nil {
			return errors.Join(err, fmt.Errorf("delete index %s: %w", indexKey, derr))
		}
		return err
	}
	taken := errors.Is(perr, store.ErrPreconditionFailed)
	if !taken && !mayHaveStored(ctx, perr) {
		return nil, deleteIndex(fmt.Errorf("write stage manifest %s: %w", mkey, perr))
	}
	old, err := LoadStageManifest(rctx, st, l, s.Query, s.Stage)
	switch {
	case err == nil && old.Index != nil && old.Index.Key == s.Index.Key:
		return old, nil // this seal's put landed
	case err == nil:
		if derr := deleteIndex(nil); derr != nil {
			return nil, derr
		}
		return sealedAgain(old, s)
	case store.IsNotFound(err) && taken:
		return nil, fmt.Errorf("write stage manifest %s: %w, and it is not there: %w", mkey, perr, err)
	}
	return nil, fmt.Errorf("%w: seal %s stage %d: the stage manifest put failed (%w), and reading %s back failed: %w; index %s kept",
		ErrCommitUnknown, s.Query, s.Stage, perr, mkey, err, indexKey)
}

// missingError is ErrMissingWorkers with how many of how many workers
// have no manifest.
type missingError struct {
	error
	missing, of int
}

func (e *missingError) Unwrap() error { return e.error }

func sealedAgain(old, s *Stage) (*Stage, error) {
	if o := old.Combines; o != nil {
		if o.sameAttempts(s.Workers) {
			return old, nil
		}
		return nil, fmt.Errorf("%w: seal %s stage %d: the stage is combined from %v, and this seal names %d workers or other attempts", ErrSealConflict, s.Query, s.Stage, o, len(s.Workers))
	}
	if sameAttempts(old, s) {
		return old, nil
	}
	return nil, fmt.Errorf("%w: seal %s stage %d: the stage manifest names other workers or attempts", ErrSealConflict, s.Query, s.Stage)
}

// SameEncryption fails, naming both workers, unless a and b are both
// unencrypted or both sealed under the same key: a stage is read with one
// key or none.
func SameEncryption(a, b *Worker) error {
	ea, eb := a.Encryption, b.Encryption
	switch {
	case ea == nil && eb == nil:
		return nil
	case ea != nil && eb != nil && ea.Cipher == eb.Cipher && ea.Source == eb.Source && ea.KMSKeyID == eb.KMSKeyID && ea.Fingerprint == eb.Fingerprint:
		return nil
	}
	return fmt.Errorf("%w: worker %s is %s and worker %s is %s: a stage is sealed under one key or none", ErrCorrupt, a.Worker, describeEncryption(ea), b.Worker, describeEncryption(eb))
}

func describeEncryption(e *Encryption) string {
	if e == nil {
		return "not encrypted"
	}
	return "encrypted under key " + e.Fingerprint
}

func newSealID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

func (t *Totals) add(o Totals) {
	t.Rows += o.Rows
	t.BytesLogical += o.BytesLogical
	t.BytesStored += o.BytesStored
	t.Frames += o.Frames
	t.Objects += o.Objects
	t.Parts += o.Parts
}

// sealHeads is phase 1: each worker manifest's head, keeping the offset
// table at every k-th partition only. keyOf is the key of a worker's
// manifest.
func sealHeads(ctx context.Context, st store.Reader, l Layout, query string, stage int, ids []string, keyOf func(string) string) ([]*sealWorker, error) {
	ws := make([]*sealWorker, len(ids))
	var (
		mu      sync.Mutex
		missing []string
		stride  int // k, fixed by the first head decoded
	)
	strideFor := func(partitions int) int {
		mu.Lock()
		defer mu.Unlock()
		if stride == 0 {
			perWorker := 4 * int64(partitions+1)
			stride = int(max(1, (int64(len(ids))*perWorker+sealTableBytes-1)/sealTableBytes))
		}
		return stride
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(sealFetches)
	for i, id := range ids {
		if gctx.Err() != nil {
			break // a GET failed, or the caller gave up: start no more
		}
		g.Go(func() (err error) {
			key := keyOf(id)
			// A panic (the store's, or decoding a hostile head) fails the
			// seal like a failed GET: nothing is written.
			defer safe.Recover(&err, "read of the manifest head %s", key)
			h, err := readHead(gctx, st, key)
			if store.IsNotFound(err) {
				mu.Lock()
				missing = append(missing, id)
				mu.Unlock()
				return nil
			}
			if err != nil {
				return err
			}
			if h.w.Query != query || h.w.Stage != stage || h.w.Worker != id {
				return fmt.Errorf("%w: %s names %s stage %d worker %s", ErrCorrupt, key, h.w.Query, h.w.Stage, h.w.Worker)
			}
			k := strideFor(h.w.Partitions)
			sw := &sealWorker{key: key, w: h.w, entries: h.entries, stride: k,
				head: &workerHead{w: h.w, entries: h.entries, count: h.count}}
			for p := 0; ; p += k {
				p = min(p, h.w.Partitions)
				sw.samples = append(sw.samples, uint32(h.at(p)))
				if p == h.w.Partitions {
					break
				}
			}
			ws[i] = sw
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("seal %s stage %d: %w", query, stage, context.Cause(ctx))
	}
	if len(missing) > 0 {
		slices.SortFunc(missing, compareWorkers)
		named := strings.Join(missing[:min(len(missing), sealListed)], ", ")
		if n := len(missing) - sealListed; n > 0 {
			named += fmt.Sprintf(" and %d more", n)
		}
		return nil, &missingError{error: fmt.Errorf("%w: seal %s stage %d: %d of %d workers have no manifest: %s", ErrMissingWorkers, query, stage, len(missing), len(ids), named),
			missing: len(missing), of: len(ids)}
	}
	for _, w := range ws {
		if w.w.Partitions != ws[0].w.Partitions {
			return nil, fmt.Errorf("%w: %s stage %d: worker %s has %d partitions, worker %s has %d", ErrCorrupt, query, stage, w.w.Worker, w.w.Partitions, ws[0].w.Worker, ws[0].w.Partitions)
		}
	}
	return ws, nil
}

// readHead decodes a worker manifest's head with one GET: the body is
// read as far as the head (preamble, header, offset table) and closed,
// so the entries are not transferred (beyond what is in flight). The
// object's size is not known beforehand, and a range past its end would
// fail, so the GET is not ranged.
func readHead(ctx context.Context, st store.Reader, key string) (*workerHead, error) {
	body, err := st.GetRange(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	b := make([]byte, workerPreamble, 64<<10)
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, headErr(key, len(b), err)
	}
	if b[0] == '{' { // version 1: JSON; its version is near the start
		rest, _ := io.ReadAll(io.LimitReader(body, 64<<10))
		b = append(b, rest...)
	}
	for {
		h, need, err := decodeHead(key, b)
		if err != nil || h != nil {
			return h, err
		}
		n := len(b)
		b = slices.Grow(b, need-n)[:need]
		if _, err := io.ReadFull(body, b[n:]); err != nil {
			return nil, headErr(key, need, err)
		}
	}
}

func headErr(key string, need int, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s ends before its head of %d bytes (bytes [0, %d), as its header length says)", ErrCorrupt, key, need, need)
	}
	return fmt.Errorf("read head of %s: %w", key, err)
}

// readInto fills dst with the bytes of key from off. Its length comes
// from an offset table that was checked against the header's totals, so
// a body that ends early is corrupt.
func readInto(ctx context.Context, st store.Reader, key string, off int64, dst []byte) error {
	n := int64(len(dst))
	body, err := st.GetRange(ctx, key, off, n)
	if err != nil {
		return err
	}
	defer body.Close()
	if got, err := io.ReadFull(body, dst); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: %s: bytes [%d, %d) asked for, %d arrived", ErrCorrupt, key, off, off+n, got)
		}
		return fmt.Errorf("read %s bytes [%d, %d): %w", key, off, off+n, err)
	}
	return nil
}

// writeIndex is phase 2: it builds the index object at key, block by
// block, and returns its reference (without Key).
func writeIndex(ctx context.Context, st store.Store, key string, s *Stage, ws []*sealWorker) (*Index, error) {
	P := s.Partitions
	k := ws[0].stride
	groups := len(ws[0].samples) - 1 // group g is partitions [g*k, min((g+1)*k, P))
	groupEntries := func(g int) int64 {
		var n int64
		for _, w := range ws {
			n += int64(w.samples[g+1]) - int64(w.samples[g])
		}
		return n
	}
	// The index goes out in parts of sealPartBytes, one connection's
	// worth: the uploader's object, each part after the first streamed
	// as it fills where the store streams parts, so that an index of at
	// most one part is one Put.
	up := uploader.NewObject(ctx, st, key, uploader.ObjectOptions{PartBytes: sealPartBytes})
	defer func() { _ = up.Discard(nil) }() // aborts an unfinished upload; after Complete, nothing

	var pre [indexPreamble]byte
	copy(pre[:], indexMagic)
	binary.LittleEndian.PutUint32(pre[4:], uint32(P))
	if err := up.Write(pre[:]); err != nil {
		return nil, err
	}
	// Checksums of the entries, block by block as they stream out; block
	// 0 starts with the preamble.
	crcs := make([]byte, 0, 4*blocks(int64(s.Totals.Frames), indexEntryBlock, 1))
	bcrc := crc32c(pre[:])
	first := make([]byte, 4*(P+1))
	summary := make([]PartitionStats, P)
	var written int64
	bufs := make([][]byte, len(ws))
	var arena []byte
	for ga := 0; ga < groups; {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("seal %s stage %d: %w", s.Query, s.Stage, context.Cause(ctx))
		}
		gb, n := ga, int64(0)
		for gb < groups && (gb == ga || (n+groupEntries(gb))*EntrySize <= sealBlockBytes) {
			n += groupEntries(gb)
			gb++
		}
		lo, hi := ga*k, min(gb*k, P)
		// One buffer for the block, reused: each worker's entries of the
		// block are read into their slice of it, widened to the whole
		// checksum blocks that hold them (workerEntryBlock entries at
		// most on each side), and verified before they are merged.
		var need int64
		for _, w := range ws {
			a, b := w.head.blockRange(int64(w.samples[ga]), int64(w.samples[gb]))
			need += EntrySize * (b - a)
		}
		if int64(cap(arena)) < need {
			// Room for the widest widening too (a partial checksum block
			// at each end of every worker's range), so blocks of the
			// same entries reuse one buffer rather than leave garbage
			// of their size.
			arena = make([]byte, max(need, n*EntrySize+int64(len(ws))*2*workerEntryBlock*EntrySize))
		}
		var at int64
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(sealFetches)
		for i, w := range ws {
			a, b := int64(w.samples[ga]), int64(w.samples[gb])
			ra, rb := w.head.blockRange(a, b)
			whole := arena[at : at+EntrySize*(rb-ra) : at+EntrySize*(rb-ra)]
			bufs[i] = whole[EntrySize*(a-ra) : EntrySize*(b-ra) : EntrySize*(b-ra)]
			at += EntrySize * (rb - ra)
			if a == b || gctx.Err() != nil {
				continue // nothing to read; or a read failed: start no more
			}
			g.Go(func() (err error) {
				defer safe.Recover(&err, "read of %s bytes [%d, %d)", w.key, w.entries+EntrySize*ra, w.entries+EntrySize*rb)
				if err := readInto(gctx, st, w.key, w.entries+EntrySize*ra, whole); err != nil {
					return err
				}
				return w.head.verifyEntries(w.key, whole, ra, rb)
			})
		}
		if err := g.Wait(); err != nil {
			return nil, fmt.Errorf("seal %s stage %d: partitions [%d, %d): %w", s.Query, s.Stage, lo, hi, err)
		}
		// Merge: partition by partition, worker by worker.
		cur := make([]int, len(ws))
		for p := lo; p < hi; p++ {
			binary.LittleEndian.PutUint32(first[4*p:], uint32(written))
			for i, w := range ws {
				b := bufs[i]
				for cur[i] < len(b) {
					e := b[cur[i] : cur[i]+EntrySize]
					f := getEntry(e)
					if f.Partition < p || f.Partition >= hi || f.Worker != 0 {
						return nil, fmt.Errorf("%w: %s: an entry of partitions [%d, %d) has partition %d worker %d (entries are sorted by partition)", ErrCorrupt, w.key, lo, hi, f.Partition, f.Worker)
					}
					if f.Partition != p {
						break
					}
					if err := checkFrame(&f, w.w.Objects); err != nil {
						return nil, fmt.Errorf("%w: %s: frame of partition %d %v", ErrCorrupt, w.key, p, err)
					}
					binary.LittleEndian.PutUint32(e[4:], uint32(i))
					if err := up.Write(e); err != nil {
						return nil, err
					}
					bcrc = crc32.Update(bcrc, castagnoli, e)
					summary[p].add(&f)
					cur[i] += EntrySize
					written++
					if written%indexEntryBlock == 0 {
						crcs = binary.LittleEndian.AppendUint32(crcs, bcrc)
						bcrc = 0
					}
				}
			}
		}
		for i, w := range ws {
			if cur[i] != len(bufs[i]) {
				return nil, fmt.Errorf("%w: %s: entries of partitions [%d, %d) are not sorted by partition", ErrCorrupt, w.key, lo, hi)
			}
		}
		ga = gb
	}
	binary.LittleEndian.PutUint32(first[4*P:], uint32(written))
	if written != int64(s.Totals.Frames) {
		return nil, fmt.Errorf("%w: seal %s stage %d: %d entries merged, the workers' totals say %d frames", ErrCorrupt, s.Query, s.Stage, written, s.Totals.Frames)
	}
	if written == 0 || written%indexEntryBlock != 0 {
		crcs = binary.LittleEndian.AppendUint32(crcs, bcrc)
	}
	var rec [summarySize]byte
	var sumCRC uint32
	for p := range summary {
		putSummary(rec[:], &summary[p])
		sumCRC = crc32.Update(sumCRC, castagnoli, rec[:])
		if err := up.Write(rec[:]); err != nil {
			return nil, err
		}
	}
	size := up.Size()
	if _, err := up.Complete(ctx); err != nil {
		return nil, err
	}
	return &Index{Size: size, Entries: written, EntriesOffset: indexPreamble,
		SummaryOffset: indexPreamble + EntrySize*written, First: first,
		EntryBlock: indexEntryBlock, EntryCRCs: crcs, SummaryCRC32C: sumCRC}, nil
}
