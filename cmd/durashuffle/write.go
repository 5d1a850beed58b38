package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"github.com/durashuffle/durashuffle/internal/reqs"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/endian"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/spf13/cobra"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/manifest"
)

// arrowFileMagic opens (and ends) an Arrow IPC file; a stream has none.
const arrowFileMagic = "ARROW1"

type writeOptions struct {
	stage       stageFlags
	worker      string
	attempt     string
	partitions  int
	partitionBy string
	input       string
	results     bool
	json        bool
}

type writeSummary struct {
	Query         string           `json:"query"`
	Stage         int              `json:"stage"`
	Worker        string           `json:"worker"`
	Attempt       string           `json:"attempt"`
	Committed     bool             `json:"committed"`
	Input         string           `json:"input"`
	InputFormat   string           `json:"input_format"`
	InputBatches  int              `json:"input_batches"`
	Rows          int64            `json:"rows"`
	Partitions    int              `json:"partitions"`
	PartitionBy   string           `json:"partition_by"`
	Frames        int              `json:"frames"`
	Objects       int              `json:"objects"`
	Parts         int              `json:"parts"`
	BytesLogical  int64            `json:"bytes_logical"`
	BytesStored   int64            `json:"bytes_stored"`
	CompressRatio float64          `json:"compression_ratio"`
	Seconds       float64          `json:"seconds"`
	MiBps         float64          `json:"mib_per_s"`
	Requests      map[string]int64 `json:"requests"` // the write's, after the commit guard's probe
	// CommitGuard is the guard's state (enforced or off) and GuardRequests
	// what its one probe cost (none when off).
	CommitGuard   durashuffle.GuardState `json:"commit_guard"`
	GuardRequests map[string]int64       `json:"commit_guard_requests"`
	Manifest      string                 `json:"manifest"`
}

func (a *app) writeCommand() *cobra.Command {
	o := &writeOptions{}
	cmd := &cobra.Command{
		Use:   "write",
		Short: "Write an Arrow IPC file or stream as one worker's output of a stage",
		Long: `write reads Arrow record batches from an Arrow IPC file or stream (the
format is detected; "-" reads standard input), splits every batch into
--partitions partitions by a hash of the --partition-by column, and writes
them as the output of one worker attempt. The worker manifest, written
last with a conditional put, commits it; if another attempt of the same
worker committed first, this attempt's objects are deleted and write fails.

A row's partition is a hash of its key's logical value, the same
whatever the key's physical type: numbers (integers, floats, decimals)
by their exact value (int32 5, int64 5, 5.0 and decimal 5.00 agree; an
integer key lands where the demo puts it), strings and binaries by
their bytes (plain, large, view or fixed-size alike), dates, times,
timestamps and durations by their nanoseconds (any unit; a timestamp's
zone is not part of it), intervals, booleans; dictionary and run-end
encoded keys by their values. Nulls all go to the partition of 0.
Nested (list, struct, map, union) and null-type keys are refused.
docs/partitioning.md states the hash byte by byte, with test vectors.
Every column type is carried.`,
		Example: `  # Partition a file by a string column into 16 partitions:
  durashuffle write --bucket shuffle --query q42 --stage 0 --worker 3 \
    --partitions 16 --partition-by l_shipmode -i lineitem.arrow

  # From another program's Arrow stream on stdin, as the query's results:
  produce-arrow | durashuffle write --bucket shuffle -q q42 -s 2 -w 0 \
    --partitions 1 --results -i -`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runWrite(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	o.stage.bind(fs)
	fs.StringVarP(&o.worker, "worker", "w", "", "worker ID ([A-Za-z0-9._-])")
	fs.StringVar(&o.attempt, "attempt", "", "attempt ID (default: a fresh time-ordered ID)")
	fs.IntVar(&o.partitions, "partitions", 0, "number of output partitions")
	fs.StringVar(&o.partitionBy, "partition-by", "", "column whose values pick each row's partition (optional with --partitions 1)")
	fs.StringVarP(&o.input, "input", "i", "-", `Arrow IPC file or stream to read; "-" is standard input`)
	fs.BoolVar(&o.results, "results", false, "mark the stage as a query's final results")
	fs.BoolVar(&o.json, "json", false, "print the summary as JSON")
	return cmd
}

func (o *writeOptions) validate() error {
	if err := o.stage.validate(); err != nil {
		return err
	}
	if o.worker == "" {
		return usagef("--worker is required")
	}
	if err := manifest.ValidateID("worker", o.worker); err != nil {
		return err
	}
	if o.attempt != "" {
		if err := manifest.ValidateID("attempt", o.attempt); err != nil {
			return err
		}
	}
	if o.partitions < 1 || o.partitions > durashuffle.MaxPartitions {
		return usagef("--partitions must be between 1 and %d, got %d", durashuffle.MaxPartitions, o.partitions)
	}
	if o.partitionBy == "" && o.partitions > 1 {
		return usagef("--partition-by is required with more than one partition")
	}
	return nil
}

func (a *app) runWrite(ctx context.Context, o *writeOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	cfg, err := a.config()
	if err != nil {
		return err
	}
	a.applyMemoryLimit(cfg, durashuffle.MemoryLoad{Writers: 1}, false)
	mem := memory.DefaultAllocator
	prog := a.startProgress()
	defer prog.close()
	src, format, err := openArrowInput(o.input, a.stdin, mem, prog)
	if err != nil {
		return err
	}
	defer src.Release()
	key, err := keyColumn(src.Schema(), o.partitionBy, o.partitions)
	if err != nil {
		return err
	}
	c, err := a.openClient(ctx, cfg, nil, durashuffle.WithObserver(prog.observer(int64(cfg.Write.ChunkSize))))
	if err != nil {
		return err
	}
	defer c.Close()
	// Fail before uploading anything on a store that would not make the
	// manifest a commit point (Commit checks again; the answer is kept),
	// or that does not answer at all: reading the input and encoding it
	// would only end in the same timeouts, later. A probe that failed
	// otherwise (an error the store answered with) does not stop the
	// write: its own requests say what the store answers, and Commit
	// probes again.
	switch err := c.CheckCommitGuard(ctx); {
	case errors.Is(err, durashuffle.ErrCommitGuard):
		return fmt.Errorf("write %s stage %d worker %s: %w", o.stage.query, o.stage.stage, o.worker, err)
	case noAnswer(ctx, err):
		return fmt.Errorf("write %s stage %d worker %s: the store did not answer, nothing was written: %w", o.stage.query, o.stage.stage, o.worker, err)
	case err != nil:
		a.log.Warn("commit guard probe failed; the commit probes again", "err", err)
	}
	guardRequests := c.Counter().Requests()
	prog.writingInput(c)

	start := time.Now()
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{
		Query: o.stage.query, Stage: o.stage.stage, Worker: o.worker, Attempt: o.attempt,
		Partitions: o.partitions, Schema: src.Schema(), Results: o.results, Mem: mem,
	})
	if err != nil {
		return err
	}
	sum := &writeSummary{
		Query: o.stage.query, Stage: o.stage.stage, Worker: o.worker, Attempt: w.Options().Attempt,
		Input: o.input, InputFormat: format, Partitions: o.partitions, PartitionBy: o.partitionBy,
	}
	a.log.Info("writing", "query", sum.Query, "stage", sum.Stage, "worker", sum.Worker, "attempt", sum.Attempt,
		"input", o.input, "format", format)
	if err := writeAll(w, src, key, sum); err != nil {
		if aerr := w.Abort(); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return err
	}
	m, err := w.Commit(ctx)
	if err != nil {
		return err
	}
	t := m.Totals
	sum.Committed = true
	sum.Rows, sum.Frames, sum.Objects, sum.Parts = t.Rows, t.Frames, t.Objects, t.Parts
	sum.BytesLogical, sum.BytesStored = t.BytesLogical, t.BytesStored
	sum.CompressRatio = ratio(float64(t.BytesLogical), float64(t.BytesStored))
	sum.Seconds = round(time.Since(start).Seconds())
	sum.MiBps = perSecond(t.BytesLogical, sum.Seconds)
	sum.Requests = reqs.Diff(c.Counter().Requests(), guardRequests)
	sum.CommitGuard, sum.GuardRequests = c.CommitGuard().State, guardRequests
	sum.Manifest = c.Layout().WorkerManifestKey(sum.Query, sum.Stage, sum.Worker)
	prog.done()
	if o.json {
		return printJSON(a.stdout, sum)
	}
	fmt.Fprintf(a.stdout, "committed %s stage %d worker %s attempt %s: %d rows from %d batches into %d partitions\n",
		sum.Query, sum.Stage, sum.Worker, sum.Attempt, sum.Rows, sum.InputBatches, sum.Partitions)
	fmt.Fprintf(a.stdout, "  %s logical -> %s stored (ratio %.2f) in %d frames, %d objects, %d parts; %.2f s\n",
		mib(sum.BytesLogical), mib(sum.BytesStored), sum.CompressRatio, sum.Frames, sum.Objects, sum.Parts, sum.Seconds)
	fmt.Fprintf(a.stdout, "  requests: %s\n", formatOps(sum.Requests))
	return nil
}

// writeAll hands every input batch to the writer, which scatters it by
// the key column (key < 0: every row to partition 0).
func writeAll(w *durashuffle.Writer, src recordSource, key int, sum *writeSummary) error {
	for src.Next() {
		rec := src.RecordBatch()
		sum.InputBatches++
		var err error
		if key < 0 {
			err = w.Write(0, rec)
		} else {
			err = w.WriteKeyed(rec, key)
		}
		if err != nil {
			return fmt.Errorf("input batch %d: %w", sum.InputBatches, err)
		}
	}
	if err := src.Err(); err != nil {
		return fmt.Errorf("read %s after %d batches: %w", sum.Input, sum.InputBatches, err)
	}
	return nil
}

// recordSource is a stream of input batches; a batch is valid until the
// next call to Next.
type recordSource interface {
	Schema() *arrow.Schema
	Next() bool
	RecordBatch() arrow.RecordBatch
	Err() error
	Release()
}

// openArrowInput opens name ("-": stdin) as an Arrow IPC file when it
// starts with the file magic, else as an Arrow IPC stream. It returns the
// format it found, "file" or "stream". prog counts the bytes read.
func openArrowInput(name string, stdin io.Reader, mem memory.Allocator, prog *progress) (recordSource, string, error) {
	var (
		r       io.Reader
		closeFn = func() error { return nil }
		label   = name
	)
	if name == "-" {
		r, label = stdin, "standard input"
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, "", err
		}
		r, closeFn = f, f.Close
	}
	r = prog.input(r)
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(len(arrowFileMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		closeFn()
		return nil, "", fmt.Errorf("read %s: %w", label, err)
	}
	if string(magic) == arrowFileMagic {
		// The file format's footer is at the end: it needs random access.
		var ra ipc.ReadAtSeeker
		if f, ok := r.(ipc.ReadAtSeeker); ok {
			ra = f
		} else {
			b, err := io.ReadAll(br)
			if err != nil {
				closeFn()
				return nil, "", fmt.Errorf("read %s: %w", label, err)
			}
			ra = bytes.NewReader(b)
		}
		fr, err := ipc.NewFileReader(ra, ipc.WithAllocator(mem), ipc.WithEnsureNativeEndian(false))
		if err != nil {
			closeFn()
			return nil, "", fmt.Errorf("open Arrow IPC file %s: %w", label, err)
		}
		if fr.Schema().IsNativeEndian() {
			return &fileSource{fr: fr, close: closeFn}, "file", nil
		}
		fr.Close()
		// A file in the other byte order is read as the stream of
		// messages it holds between its magic and its footer, swapped
		// message by message (arrowipc.NativeMessages).
		size, err := ra.Seek(0, io.SeekEnd)
		if err != nil {
			closeFn()
			return nil, "", fmt.Errorf("read %s: %w", label, err)
		}
		var tail [10]byte
		if _, err := ra.ReadAt(tail[:], size-10); err != nil {
			closeFn()
			return nil, "", fmt.Errorf("read %s: %w", label, err)
		}
		footer := int64(int32(binary.LittleEndian.Uint32(tail[:4])))
		end := size - 10 - footer
		if footer <= 0 || end < 8 {
			closeFn()
			return nil, "", fmt.Errorf("open Arrow IPC file %s: footer of %d bytes in a file of %d", label, footer, size)
		}
		sr, err := ipc.NewReaderFromMessageReader(arrowipc.NativeMessages(io.NewSectionReader(ra, 8, end-8)),
			ipc.WithAllocator(mem), ipc.WithEnsureNativeEndian(false))
		if err != nil {
			closeFn()
			return nil, "", fmt.Errorf("open Arrow IPC file %s: %w", label, err)
		}
		return nativeOrder(&streamSource{Reader: sr, close: closeFn}), "file", nil
	}
	if len(magic) == 0 {
		closeFn()
		return nil, "", fmt.Errorf("%s is empty: want an Arrow IPC file or stream", label)
	}
	// A stream is read through arrowipc.NativeMessages, which checks
	// every message header before arrow-go's reader decodes it (arrow-go
	// allocates what a header states: a hostile schema would end the
	// process) and swaps the bodies of a stream in the other byte order.
	// Input that is no IPC stream is left to arrow-go's reader and errors.
	head, _ := br.Peek(8)
	large := false // a schema message larger than the look-ahead
	if len(head) == 8 {
		n := int64(binary.LittleEndian.Uint32(head[4:]))
		if binary.LittleEndian.Uint32(head) != 0xFFFFFFFF {
			n = int64(binary.LittleEndian.Uint32(head)) - 4
		}
		if n > 0 && n <= int64(br.Size()-8) {
			head, _ = br.Peek(8 + int(n))
		}
		large = n > int64(br.Size()-8) && n <= 1<<30
	}
	var sr *ipc.Reader
	if _, ok := arrowipc.StreamEndianness(head); !ok && !large {
		sr, err = ipc.NewReader(br, ipc.WithAllocator(mem), ipc.WithEnsureNativeEndian(false))
	} else {
		sr, err = ipc.NewReaderFromMessageReader(arrowipc.NativeMessages(br), ipc.WithAllocator(mem), ipc.WithEnsureNativeEndian(false))
	}
	if err != nil {
		closeFn()
		return nil, "", fmt.Errorf("open Arrow IPC stream %s: %w", label, err)
	}
	return nativeOrder(&streamSource{Reader: sr, close: closeFn}), "stream", nil
}

// nativeOrder returns src, or, when src's schema declares the other byte
// order than this machine's (its bodies were swapped to native order by
// arrowipc.NativeMessages), a source of its batches under the schema
// marked native. Frames are always written in native order.
func nativeOrder(src recordSource) recordSource {
	sc := src.Schema()
	if sc.IsNativeEndian() {
		return src
	}
	return &nativeSource{recordSource: src, sc: sc.WithEndianness(endian.NativeEndian)}
}

// nativeSource relabels the batches of a source as native order.
type nativeSource struct {
	recordSource
	sc  *arrow.Schema
	cur arrow.RecordBatch
}

func (s *nativeSource) Schema() *arrow.Schema { return s.sc }

func (s *nativeSource) Next() bool {
	if s.cur != nil {
		s.cur.Release()
		s.cur = nil
	}
	if !s.recordSource.Next() {
		return false
	}
	rec := s.recordSource.RecordBatch()
	s.cur = array.NewRecordBatch(s.sc, rec.Columns(), rec.NumRows())
	return true
}

func (s *nativeSource) RecordBatch() arrow.RecordBatch { return s.cur }

func (s *nativeSource) Release() {
	if s.cur != nil {
		s.cur.Release()
		s.cur = nil
	}
	s.recordSource.Release()
}

type streamSource struct {
	*ipc.Reader
	close func() error
}

func (s *streamSource) Release() {
	s.Reader.Release()
	s.close()
}

// fileSource iterates an Arrow IPC file's batches in order.
type fileSource struct {
	fr    *ipc.FileReader
	close func() error
	next  int
	cur   arrow.RecordBatch
	err   error
}

func (f *fileSource) Schema() *arrow.Schema { return f.fr.Schema() }

func (f *fileSource) Next() bool {
	if f.cur != nil {
		f.cur.Release()
		f.cur = nil
	}
	if f.err != nil || f.next >= f.fr.NumRecords() {
		return false
	}
	f.cur, f.err = f.fr.RecordBatchAt(f.next)
	f.next++
	return f.err == nil
}

func (f *fileSource) RecordBatch() arrow.RecordBatch { return f.cur }
func (f *fileSource) Err() error                     { return f.err }

func (f *fileSource) Release() {
	if f.cur != nil {
		f.cur.Release()
		f.cur = nil
	}
	f.fr.Close()
	f.close()
}

// noAnswer says whether err is a store that did not answer: a connect or
// first-byte timeout, or a deadline of the call's own (not the caller's).
func noAnswer(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
