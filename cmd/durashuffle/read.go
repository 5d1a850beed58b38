package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/csv"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/spf13/cobra"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/reader"
)

type readOptions struct {
	stage      stageFlags
	partition  int
	partitions string
	offset     int64
	limit      int64
	format     string
	output     string
	order      string
}

func (a *app) readCommand() *cobra.Command {
	o := &readOptions{}
	cmd := &cobra.Command{
		Use:   "read",
		Short: "Stream partitions of a stage, or a page of a query's results, as Arrow, CSV or JSON lines",
		Long: `read opens a stage (one GET when it is sealed) and streams records out.

With --partition or --partitions it reads those partitions, in ascending
partition order, then by worker ID, then in the order each worker wrote
them. Without them it reads the whole stage as a query's results, in the
same order; --offset and --limit select a page of rows, and only the
frames holding that page are fetched. --offset and --limit also apply to
a partition read.

--order storage reads the same rows in the order they are stored (worker
by worker, each worker's frames in write order) instead of by partition:
neighbouring frames of any partition share a ranged GET, so reading a
whole stage takes GETs of read_range_bytes rather than one per frame,
with read_ahead of them in flight. For consumers that do not care about
row order; --offset and --limit then count rows in that order.

Formats: arrow (default) is a standard Arrow IPC stream that any Arrow
implementation reads (pyarrow.ipc.open_stream), of every Arrow type; csv
has a header row and empty fields for nulls; jsonl is one JSON object per
row with the columns in schema order. Arrow output is refused on a
terminal: use -o or a pipe.

csv and jsonl write lists, structs and maps as JSON, binaries in base64,
dictionary and run-end encoded columns as their values. They refuse,
naming the column and its type, a union column (its type codes would be
lost), a struct with two fields of one name, and for jsonl two columns of
one name. In csv an empty string and a null are both an empty field, and
in a csv of one column a null row is an empty line, which many readers
skip; jsonl refuses NaN and infinite floats. See docs/interop.md.`,
		Example: `  # Partition 7 as an Arrow stream, into pandas:
  durashuffle read --bucket shuffle -q q42 -s 0 --partition 7 -o p7.arrows
  python -c "import pyarrow as pa; print(pa.ipc.open_stream('p7.arrows').read_pandas())"

  # Partitions 0 to 15 as CSV:
  durashuffle read --bucket shuffle -q q42 -s 0 --partitions 0-15 --format csv > p0-15.csv

  # A whole stage as fast as the link allows, in storage order:
  durashuffle read --bucket shuffle -q q42 -s 0 --order storage --read-ahead 8 -o stage0.arrows

  # The second page of 100 result rows as JSON lines:
  durashuffle read --bucket shuffle -q q42 -s 2 --offset 100 --limit 100 --format jsonl`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runRead(cmd, o)
		},
	}
	fs := cmd.Flags()
	o.stage.bind(fs)
	fs.IntVarP(&o.partition, "partition", "p", 0, "read this partition")
	fs.StringVar(&o.partitions, "partitions", "", "read these partitions: a range A-B (inclusive), or a list such as 0,3,8-11")
	fs.Int64Var(&o.offset, "offset", 0, "skip this many rows")
	fs.Int64Var(&o.limit, "limit", -1, "stop after this many rows (-1: no limit)")
	fs.StringVarP(&o.format, "format", "f", "arrow", "output format: arrow, csv or jsonl")
	fs.StringVarP(&o.output, "output", "o", "-", `output file; "-" is standard output`)
	fs.StringVar(&o.order, "order", "partition", "row order: partition (by partition, worker, write order) or storage (as stored, fewest GETs)")
	return cmd
}

// parsePartitions reads "A-B", "N" or a comma-separated list of both.
func parsePartitions(s string) ([]int, error) {
	var out []int
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q is not a partition number or range A-B", item)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || b < a {
				return nil, fmt.Errorf("%q is not a range A-B with A <= B", item)
			}
		}
		if b-a >= durashuffle.MaxPartitions {
			return nil, fmt.Errorf("range %q has more than %d partitions", item, durashuffle.MaxPartitions)
		}
		for p := a; p <= b; p++ {
			out = append(out, p)
		}
	}
	return out, nil
}

func (a *app) runRead(cmd *cobra.Command, o *readOptions) error {
	ctx := cmd.Context()
	if err := o.stage.validate(); err != nil {
		return err
	}
	var parts []int
	switch fs := cmd.Flags(); {
	case fs.Changed("partition") && fs.Changed("partitions"):
		return usagef("--partition and --partitions are mutually exclusive")
	case fs.Changed("partition"):
		if o.partition < 0 {
			return usagef("--partition %d is negative", o.partition)
		}
		parts = []int{o.partition}
	case fs.Changed("partitions"):
		var err error
		if parts, err = parsePartitions(o.partitions); err != nil {
			return usagef("--partitions: %v", err)
		}
	}
	if o.offset < 0 {
		return usagef("--offset must not be negative, got %d", o.offset)
	}
	if o.limit < -1 {
		return usagef("--limit must be -1 (no limit) or at least 0, got %d", o.limit)
	}
	if o.order != "partition" && o.order != "storage" {
		return usagef("--order %q: want partition or storage", o.order)
	}
	switch o.format {
	case "arrow", "csv", "jsonl":
	default:
		return usagef("--format %q: want arrow, csv or jsonl", o.format)
	}
	if o.format == "arrow" && o.output == "-" && isTTY(a.stdout) {
		return usagef("refusing to write a binary Arrow stream to a terminal: use -o FILE, a pipe, or --format csv|jsonl")
	}

	var prog *progress
	if o.output != "-" {
		prog = a.startProgress()
		defer prog.close()
	}
	c, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	start := time.Now()
	st, err := c.OpenStage(ctx, o.stage.query, o.stage.stage)
	if err != nil {
		return err
	}
	var recs *reader.Records
	switch {
	case o.order == "storage":
		recs, err = st.ReadStored(ctx, parts)
	case parts == nil:
		recs, err = st.ReadResults(ctx, o.offset, o.limit)
	default:
		recs, err = st.ReadPartitions(ctx, parts)
	}
	if errors.Is(err, reader.ErrPartition) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	defer recs.Close()
	var src recordSource = prog.reading(c, recs, recs.Plan())
	if (parts != nil || o.order == "storage") && (o.offset > 0 || o.limit >= 0) {
		src = &pageSource{recordSource: src, skip: o.offset, left: o.limit}
	}

	out, finish, err := createOutput(o.output, a.stdout)
	if err != nil {
		return err
	}
	rows, err := writeRecords(out, o.format, st.Schema(), src)
	if err = finish(err); err != nil {
		return err
	}
	prog.done()
	a.log.Info("read", "query", o.stage.query, "stage", o.stage.stage, "rows", rows,
		"seconds", round(time.Since(start).Seconds()), "requests", formatOps(c.Counter().Requests()))
	return nil
}

// createOutput opens name ("-": stdout) buffered. finish flushes and
// closes it, removing a file that was not completely written.
func createOutput(name string, stdout io.Writer) (io.Writer, func(error) error, error) {
	if name == "-" {
		bw := bufio.NewWriterSize(stdout, 1<<20)
		return bw, func(err error) error {
			return errors.Join(err, bw.Flush())
		}, nil
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, nil, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	return bw, func(err error) error {
		if err == nil {
			err = bw.Flush()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(name)
		}
		return err
	}, nil
}

// writeRecords writes every batch of src in format and returns the rows
// written.
func writeRecords(w io.Writer, format string, schema *arrow.Schema, src recordSource) (rows int64, err error) {
	if err := textLimits(format, schema); err != nil {
		return 0, err
	}
	var put func(arrow.RecordBatch) error
	var end func() error
	switch format {
	case "arrow":
		iw := ipc.NewWriter(w, ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator))
		put = func(r arrow.RecordBatch) error {
			// A page's first and last batches are slices: arrow-go's IPC
			// writer needs list views and unions at offset 0.
			r = arrowipc.ForIPC(r, memory.DefaultAllocator)
			defer r.Release()
			return iw.Write(r)
		}
		end = iw.Close
	case "csv":
		cw := csv.NewWriter(w, schema, csv.WithHeader(true), csv.WithNullWriter(""),
			csv.WithCustomTypeConverter(nestedToString))
		put = func(r arrow.RecordBatch) error { return cw.Write(r) }
		end = func() error {
			if schema.NumFields() > 0 && rows == 0 {
				// The header is written with the first batch; an empty
				// result still gets it.
				empty := array.NewRecordBatch(schema, emptyColumns(schema), 0)
				defer empty.Release()
				if err := cw.Write(empty); err != nil {
					return err
				}
			}
			return cw.Flush()
		}
	case "jsonl":
		jw := &jsonLines{w: w}
		put, end = jw.write, func() error { return nil }
	}
	defer func() {
		// arrow/csv panics on a type it cannot render.
		if p := recover(); p != nil {
			err = fmt.Errorf("%s output: %v", format, p)
		}
	}()
	for src.Next() {
		rec := src.RecordBatch()
		if err := put(rec); err != nil {
			return rows, fmt.Errorf("write %s: %w", format, err)
		}
		rows += rec.NumRows()
	}
	if err := src.Err(); err != nil {
		return rows, err
	}
	return rows, end()
}

func emptyColumns(schema *arrow.Schema) []arrow.Array {
	cols := make([]arrow.Array, schema.NumFields())
	for i, f := range schema.Fields() {
		cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, 0)
	}
	return cols
}

// textLimits refuses, before any row is written, a schema that csv or
// jsonl cannot express without losing what a value is: a union (its
// values are written without the type they are of, so two types alike
// in text could not be told apart), a struct with two fields of one name
// (a JSON object keeps one of them), and for jsonl two columns of one
// name. The error names the column and its type.
func textLimits(format string, schema *arrow.Schema) error {
	if format != "csv" && format != "jsonl" {
		return nil
	}
	seen := map[string]int{}
	for i, f := range schema.Fields() {
		col := fmt.Sprintf("%s output: column %d %q (%s)", format, i, f.Name, f.Type)
		if j, dup := seen[f.Name]; dup && format == "jsonl" {
			return fmt.Errorf("%s: column %d has the same name, and a JSON object holds one key of a name: use --format csv or arrow", col, j)
		}
		seen[f.Name] = i
		if why := textLimit(f.Type); why != "" {
			return fmt.Errorf("%s: %s: use --format arrow", col, why)
		}
	}
	return nil
}

// textLimit says why a value of type dt, at any depth, cannot be written
// as text without loss ("" when it can).
func textLimit(dt arrow.DataType) string {
	switch t := dt.(type) {
	case arrow.UnionType:
		return fmt.Sprintf("a %s value is written without its type code, which text cannot recover", t.Name())
	case *arrow.DictionaryType:
		return textLimit(t.ValueType)
	case arrow.ExtensionType:
		return textLimit(t.StorageType())
	case *arrow.StructType:
		names := map[string]bool{}
		for _, f := range t.Fields() {
			if names[f.Name] {
				return fmt.Sprintf("a struct has two fields named %q, and a JSON object holds one key of a name", f.Name)
			}
			names[f.Name] = true
		}
	}
	if n, ok := dt.(arrow.NestedType); ok {
		for _, f := range n.Fields() {
			if why := textLimit(f.Type); why != "" {
				return why
			}
		}
	}
	return ""
}

// nestedToString renders the types arrow/csv has no converter for (lists,
// structs, maps and list views as JSON; dictionaries and run-end encoded
// values as their value; decimal32 and decimal64, times, durations and
// intervals as their ValueStr; extension types as their storage) .
func nestedToString(typ arrow.DataType, col arrow.Array) ([]string, bool) {
	if ext, ok := col.(array.ExtensionArray); ok {
		// arrow/csv calls extension arrays' ValueStr, which not every
		// extension type has: their storage is what they hold.
		st := ext.Storage()
		if out, ok := nestedToString(st.DataType(), st); ok {
			return out, true
		}
		out := make([]string, col.Len())
		for i := range out {
			if st.IsValid(i) {
				out[i] = st.ValueStr(i)
			}
		}
		return out, true
	}
	switch typ.ID() {
	case arrow.LIST, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST, arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW,
		arrow.STRUCT, arrow.MAP, arrow.DICTIONARY, arrow.SPARSE_UNION, arrow.DENSE_UNION, arrow.RUN_END_ENCODED,
		arrow.STRING_VIEW, arrow.BINARY_VIEW, arrow.INTERVAL_MONTHS, arrow.INTERVAL_DAY_TIME, arrow.INTERVAL_MONTH_DAY_NANO,
		arrow.DECIMAL32, arrow.DECIMAL64, arrow.TIME32, arrow.TIME64, arrow.DURATION:
	default:
		return nil, false
	}
	out := make([]string, col.Len())
	for i := range out {
		if col.IsValid(i) {
			out[i] = col.ValueStr(i)
		}
	}
	return out, true
}

// jsonLines writes one JSON object per row, columns in schema order.
type jsonLines struct {
	w   io.Writer
	buf []byte
}

func (j *jsonLines) write(rec arrow.RecordBatch) error {
	fields := rec.Schema().Fields()
	names := make([][]byte, len(fields))
	for i, f := range fields {
		b, err := json.Marshal(f.Name)
		if err != nil {
			return err
		}
		names[i] = b
	}
	for r := range int(rec.NumRows()) {
		j.buf = append(j.buf[:0], '{')
		for c, col := range rec.Columns() {
			if c > 0 {
				j.buf = append(j.buf, ',')
			}
			j.buf = append(j.buf, names[c]...)
			j.buf = append(j.buf, ':')
			v, err := json.Marshal(col.GetOneForMarshal(r))
			if err != nil {
				return fmt.Errorf("column %s row %d: %w", fields[c].Name, r, err)
			}
			j.buf = append(j.buf, v...)
		}
		j.buf = append(j.buf, '}', '\n')
		if _, err := j.w.Write(j.buf); err != nil {
			return err
		}
	}
	return nil
}

// pageSource applies an offset and a limit (left < 0: none) to a stream.
type pageSource struct {
	recordSource
	skip, left int64
	cur        arrow.RecordBatch
}

func (p *pageSource) Next() bool {
	if p.cur != nil {
		p.cur.Release()
		p.cur = nil
	}
	for p.left != 0 && p.recordSource.Next() {
		rec := p.recordSource.RecordBatch()
		n := rec.NumRows()
		if p.skip >= n {
			p.skip -= n
			continue
		}
		end := n
		if p.left >= 0 {
			end = min(n, p.skip+p.left)
			p.left -= end - p.skip
		}
		p.cur = rec.NewSlice(p.skip, end)
		p.skip = 0
		return true
	}
	return false
}

func (p *pageSource) RecordBatch() arrow.RecordBatch { return p.cur }

func (p *pageSource) Release() {
	if p.cur != nil {
		p.cur.Release()
		p.cur = nil
	}
	p.recordSource.Release()
}

// Compile-time check: reader.Records is a recordSource.
var _ recordSource = (*reader.Records)(nil)
