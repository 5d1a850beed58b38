package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"

	"github.com/durashuffle/durashuffle/internal/testkit/demo"
)

// mapFileKey is writer w's map file.
func mapFileKey(j *Job, w int) string { return fanKey(j, "map", fmt.Sprintf("w%05d", w)) }

// mapIndexPath is where writer w's index is kept: on the writer's
// machine, as Spark keeps its .index file next to the .data file, read
// by the reducers without a request to S3 (Spark's map output tracker
// gives them each block's size).
func mapIndexPath(dir string, w int) string { return filepath.Join(dir, fmt.Sprintf("w%05d.index", w)) }

// writeMapFile is Spark's sort shuffle with the map output uploaded to
// S3: every writer sorts its rows by partition on local disk (runSorter,
// with the same memory as durashuffle's coalesce_budget), merges the
// runs into one partition-sorted file (one Arrow IPC stream, a
// partition's LZ4 batches together) and an index of the partitions'
// offsets, and uploads the file with the AWS transfermanager, with the
// same part size and concurrency as durashuffle's uploads.
func writeMapFile(ctx context.Context, j *Job) (*Result, error) {
	tm, counter, clock, tr, err := tmClient(ctx, j)
	if err != nil {
		return nil, err
	}
	defer closeIdle(tr)
	return writeSorted(ctx, j, counter, clock, 1, func(ctx context.Context, w int, s *runSorter, disk *diskMeter) (int64, error) {
		path := filepath.Join(j.Fan.Dir, fmt.Sprintf("w%05d.data", w))
		off, err := s.merge(path)
		if err != nil {
			return 0, fmt.Errorf("writer %d: %w", w, err)
		}
		if err := writeIndex(mapIndexPath(j.Fan.Dir, w), off, disk); err != nil {
			return 0, fmt.Errorf("writer %d: %w", w, err)
		}
		f, err := os.Open(path)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		key := mapFileKey(j, w)
		if _, err := tm.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: aws.String(j.Bucket), Key: aws.String(key), Body: f}); err != nil {
			return 0, fmt.Errorf("writer %d: upload %s: %w", w, key, err)
		}
		return off[j.Data.Partitions] + int64(len(eos)), nil
	})
}

// writeIndex writes a map file's index: the partitions' offsets, P + 1
// little-endian int64s.
func writeIndex(path string, off []int64, disk *diskMeter) error {
	b := make([]byte, 8*len(off))
	for i, o := range off {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(o))
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	disk.add(int64(len(b)))
	return nil
}

// readIndex reads the index of a map file of parts partitions.
func readIndex(path string, parts int) ([]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) != 8*(parts+1) {
		return nil, fmt.Errorf("index %s: %d bytes, want %d for %d partitions", path, len(b), 8*(parts+1), parts)
	}
	off := make([]int64, parts+1)
	for i := range off {
		off[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return off, nil
}

// readMapFile: Readers readers at once, each reading its contiguous
// range of about P / Readers partitions from every writer's map file,
// one contiguous byte range per file, with ranged GETs of at most
// read_range_bytes, read_ahead GETs in flight per reader (as
// durashuffle's reader), every batch decoded and counted. The offsets
// come from the writers' indexes, read before the clock starts.
func readMapFile(ctx context.Context, j *Job) (*Result, error) {
	st, gets, counter, done, err := fanReadStore(ctx, j)
	if err != nil {
		return nil, err
	}
	defer done()
	workers, parts := max(1, j.Data.Workers), max(1, j.Data.Partitions)
	offs := make([][]int64, workers)
	for w := range offs {
		if offs[w], err = readIndex(mapIndexPath(j.Fan.Dir, w), parts); err != nil {
			return nil, err
		}
	}
	ranges := demo.Ranges(int64(parts), min(max(1, j.Readers), parts))
	step := max(1, int64(j.Config.Read.RangeBytes))
	prefix := schemaPrefix()
	return readEachRange(ctx, j, counter, gets, ranges, func(ctx context.Context, rg demo.Range, rows, logical *atomic.Int64) error {
		var pieces []fetchPiece
		count := make([]int, workers)
		for w := range workers {
			lo, hi := offs[w][rg.Lo], offs[w][rg.Hi]
			for o := lo; o < hi; o += step {
				pieces = append(pieces, fetchPiece{key: mapFileKey(j, w), off: o, n: min(step, hi-o)})
				count[w]++
			}
		}
		f := prefetch(ctx, st, pieces, j.Config.Read.Ahead)
		defer f.stop()
		for w, n := range count {
			if n == 0 {
				continue
			}
			r := io.MultiReader(bytes.NewReader(prefix), f.reader(n), bytes.NewReader(eos))
			if err := drainIPC(r, rows, logical); err != nil {
				return fmt.Errorf("%s, partitions %d-%d: %w", mapFileKey(j, w), rg.Lo, rg.Hi-1, err)
			}
		}
		return nil
	})
}
