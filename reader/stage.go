package reader

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/keys"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// Stage is an opened stage: its manifest and schema, ready to stream any
// of its partitions. Safe for concurrent use; every Read call returns an
// independent stream.
type Stage struct {
	st        store.Reader
	l         manifest.Layout
	m         *manifest.Stage
	o         Options
	schema    *arrow.Schema
	schemaErr error
	dec       decoder
	open      *frame.Opener // the stage's frames are encrypted; nil: they are not
	keys      [][]string    // keys[w][o]: full key of worker w's object o
}

// decoder decodes the stage's frames: a *frame.Decoder.
type decoder interface {
	Decode(b []byte, mem memory.Allocator) ([]arrow.RecordBatch, error)
}

// Open loads the stage's manifest (exactly one GET when the stage is
// sealed; a LIST and a GET per worker manifest otherwise) and returns the
// stage. A sealed stage's frame entries are not loaded: each read
// fetches the entries of its partitions from the stage's index (one
// ranged GET for a partition range). st should already carry the retry layer: the reader does not
// retry on its own.
func Open(ctx context.Context, st store.Store, l manifest.Layout, query string, stage int, o Options) (*Stage, error) {
	m, err := manifest.LoadStage(ctx, st, l, query, stage)
	if err != nil {
		return nil, err
	}
	s := FromManifest(st, l, m, o)
	if s.schemaErr != nil {
		return nil, s.schemaErr
	}
	return s, nil
}

// FromManifest returns a stage for a manifest already in hand, without
// any request. A schema that does not decode is reported by every Read.
func FromManifest(st store.Reader, l manifest.Layout, m *manifest.Stage, o Options) *Stage {
	s := &Stage{st: st, l: l, m: m, o: o.withDefaults()}
	if len(m.Schema) == 0 {
		// A stage whose writers never saw a record may have no schema.
		s.schema = arrow.NewSchema(nil, nil)
	} else if s.schema, s.schemaErr = frame.DecodeSchema(m.Schema); s.schemaErr != nil {
		s.schemaErr = fmt.Errorf("%s stage %d: %w", m.Query, m.Stage, s.schemaErr)
	}
	if s.schemaErr == nil {
		if s.dec, s.schemaErr = frame.NewDecoder(s.schema); s.schemaErr != nil {
			s.schemaErr = fmt.Errorf("%s stage %d: %w", m.Query, m.Stage, s.schemaErr)
		}
	}
	if s.schemaErr == nil {
		s.open, s.schemaErr = openerOf(m, o.Key)
	}
	s.keys = make([][]string, len(m.Workers))
	for i, w := range m.Workers {
		s.keys[i] = make([]string, len(w.Objects))
		for j, obj := range w.Objects {
			s.keys[i][j] = l.ObjectKey(m.Query, m.Stage, obj.Key)
		}
	}
	return s
}

// openerOf checks key against the encryption m records and returns the
// opener of its frames: nil for a stage that is not encrypted.
func openerOf(m *manifest.Stage, key []byte) (*frame.Opener, error) {
	for i := range m.Workers {
		if err := manifest.SameEncryption(&m.Workers[0], &m.Workers[i]); err != nil {
			return nil, fmt.Errorf("%s stage %d: %w", m.Query, m.Stage, err)
		}
	}
	e := m.Encrypted()
	switch {
	case e == nil && key == nil:
		return nil, nil
	case e == nil:
		return nil, fmt.Errorf("%w: %s stage %d is not encrypted, and a key was given: refusing to read it in the clear", ErrKey, m.Query, m.Stage)
	case key == nil:
		return nil, fmt.Errorf("%w: %s stage %d is encrypted (%s, key %s%s), and no key was given", ErrKey, m.Query, m.Stage, e.Cipher, e.Fingerprint, kmsNote(e))
	}
	sk, err := keys.StageKey(key, m.Query, m.Stage)
	if err != nil {
		return nil, fmt.Errorf("%s stage %d: %w", m.Query, m.Stage, err)
	}
	if got := keys.Fingerprint(sk); got != e.Fingerprint {
		return nil, fmt.Errorf("%w: %s stage %d is encrypted under key %s%s, and the key given derives key %s: wrong key", ErrKey, m.Query, m.Stage, e.Fingerprint, kmsNote(e), got)
	}
	return frame.NewOpener(sk, m.Query, m.Stage)
}

func kmsNote(e *manifest.Encryption) string {
	if e.KMSKeyID == "" {
		return ""
	}
	return " wrapped by KMS key " + e.KMSKeyID
}

// Manifest returns the stage's manifest: its workers' headers and, when
// sealed, the reference to its index. It holds no frame entries of a
// sealed stage; Summary and the reads fetch what they need. Callers must
// not modify it.
func (s *Stage) Manifest() *manifest.Stage { return s.m }

// Summary returns each partition's rows, bytes and frames: one ranged GET
// of the index's summary table when the stage is sealed, none otherwise.
func (s *Stage) Summary(ctx context.Context) ([]manifest.PartitionStats, error) {
	return s.m.Summary(ctx, s.st, s.l)
}

// Schema returns the schema of every record of the stage (nil only when
// the manifest's schema does not decode).
func (s *Stage) Schema() *arrow.Schema { return s.schema }

// ReadPartitions streams the records of the given partitions: one, a set
// or a range, in any order and with repeats; nil or empty means all. The
// stream's order is fixed: partitions ascending, then workers in manifest
// order, then each worker's frames in write order. ctx governs the whole
// stream, not just this call: cancelling it stops the prefetch and makes
// Next return false with the cause in Err. A partition outside the stage
// fails at once, naming it and the partition count.
//
// A set of several partitions is read in groups of neighbouring
// partitions of up to three quarters of the window's bytes (ReadAhead x
// RangeBytes): each group's frames are fetched in storage order, every
// worker's run of them in one GET of up to RangeBytes (the frames of
// neighbouring partitions lie together in each sorted run), ReadAhead
// GETs at a time, and then decoded one by one as Next reaches them, in
// the order above: a group holds its stored bytes and the records of
// the frame being delivered. A partition larger than a group streams on
// its own. Each object's consecutive ranges, within a group and across
// groups, are read through one GET of up to SpanBytes, range by range
// into their own buffers (the stream's memory is its ranges', whatever
// the GET's size): a range of partitions so costs about one GET per
// object it reads and SpanBytes of it, not one per range or frame. The
// ranges of one object sharing a GET move on one connection, one after
// another: a stream reading a single object reads it at one
// connection's rate (ReadStored keeps ReadAhead GETs in flight).
func (s *Stage) ReadPartitions(ctx context.Context, partitions []int) (*Records, error) {
	ws, err := s.partitionFrames(ctx, partitions)
	if err != nil {
		return nil, err
	}
	budget := int64(s.o.ReadAhead) * s.o.RangeBytes
	return s.streamGroups(ctx, partitionGroups(ws, s.o.RangeBytes, s.o.GapBytes, budget*3/4, s.o.ReadAhead), true), nil
}

// partitionFrames lists the frames of the given partitions (nil or empty:
// all) in ReadPartitions' order, failing on a schema that does not decode
// or a partition outside the stage. A sealed stage's come from its index:
// one ranged GET for the entries of partitions [min, max].
func (s *Stage) partitionFrames(ctx context.Context, partitions []int) ([]want, error) {
	if s.schemaErr != nil {
		return nil, s.schemaErr
	}
	ps, err := normalizePartitions(partitions, s.m.Partitions)
	if err != nil {
		return nil, fmt.Errorf("read %s stage %d: %w", s.m.Query, s.m.Stage, err)
	}
	if s.m.Index == nil {
		return selectFrames(s.m, s.keys, ps), nil
	}
	fs, err := s.m.Frames(ctx, s.st, s.l, ps)
	if err != nil {
		return nil, fmt.Errorf("read %s stage %d: %w", s.m.Query, s.m.Stage, err)
	}
	return wantFrames(fs, s.keys), nil
}

// ReadStored streams the records of the given partitions (nil or empty:
// all) in the order they are stored rather than by partition: worker by
// worker, each worker's frames in write order. Neighbouring frames share
// a ranged GET whatever their partition, so reading a whole stage, or a
// partition range whose frames lie close together, takes GETs of
// RangeBytes (as a whole-object download would) instead of one GET per
// frame; the window (ReadAhead) is the number of GETs in flight, each
// range a GET of its own (not SpanBytes: one stream's rate is its GETs
// in flight). It is
// for consumers that do not need partition order (a hash aggregation, a
// copy, a results download): Records.Partition says which partition each
// batch belongs to. Every frame is CRC-checked and decoded as with
// ReadPartitions; the same frames are delivered, in another order.
func (s *Stage) ReadStored(ctx context.Context, partitions []int) (*Records, error) {
	ws, err := s.partitionFrames(ctx, partitions)
	if err != nil {
		return nil, err
	}
	return s.stream(ctx, evenSpans(storageOrder(ws), s.o.RangeBytes, s.o.GapBytes, s.o.ReadAhead)), nil
}

// ReadResults streams rows [offset, offset+limit) of the whole stage in
// ReadPartitions' order (limit < 0: to the end). The manifest's row counts
// pick the frames that hold the page, so frames before it are never
// fetched and fetching stops at its last row: page N costs GETs for the
// frames of page N only. The first and last batches are sliced to the
// page's bounds.
func (s *Stage) ReadResults(ctx context.Context, offset, limit int64) (*Records, error) {
	if s.schemaErr != nil {
		return nil, s.schemaErr
	}
	if offset < 0 {
		return nil, fmt.Errorf("read results of %s stage %d: offset %d is negative", s.m.Query, s.m.Stage, offset)
	}
	all, err := s.partitionFrames(ctx, nil)
	if err != nil {
		return nil, err
	}
	ws := pageFrames(all, offset, limit)
	return s.stream(ctx, planSpans(ws, s.o.RangeBytes, s.o.GapBytes)), nil
}
