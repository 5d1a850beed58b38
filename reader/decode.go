package reader

import (
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/safe"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

func frameErr(s *Stage, f spanFrame, err error) *FrameError {
	return &FrameError{Key: f.Key, Offset: f.Frame.Offset, Length: f.Frame.Length,
		Partition: f.Frame.Partition, Worker: s.m.Workers[f.Worker].Worker, Err: err}
}

// decodeChecked verifies b against the manifest (its CRC32C unless the
// bytes already passed it: checked; an encrypted frame by its tag, and
// by its CRC32C only to name the failure when the tag does not verify)
// and decodes it, applying the frame's Skip and Take. A panic in the decoder (a bug; the bytes are as
// written, their CRC32C matched) fails the frame with a *safe.PanicError
// naming it. It is not a *FrameError: the data is not known to be
// damaged, and reading it again would meet the same bug.
func decodeChecked(s *Stage, f spanFrame, b []byte, checked bool) (out []arrow.RecordBatch, err error) {
	defer func() {
		if v := recover(); v != nil {
			// What the decoder allocated before the panic is left to the
			// garbage collector: it may be half-built.
			out, err = nil, safe.Recovered(v, "decode of the frame of partition %d at offset %d of %s (%d bytes, worker %s)",
				f.Frame.Partition, f.Frame.Offset, f.Key, f.Frame.Length, s.m.Workers[f.Worker].Worker)
		}
	}()
	// An encrypted frame's GCM tag covers every byte its CRC32C does:
	// the CRC32C is computed only for a frame that does not open, to
	// name a checksum mismatch as it is named for a plain frame.
	badCRC := func(b []byte) error {
		if got := store.CRC32C(b); got != f.Frame.CRC32C {
			return frameErr(s, f, fmt.Errorf("%w: stored bytes have CRC32C %08x, manifest says %08x", ErrChecksum, got, f.Frame.CRC32C))
		}
		return nil
	}
	if !checked && s.open == nil {
		if err := badCRC(b); err != nil {
			return nil, err
		}
	}
	if s.open != nil {
		// A compressed frame's records never point into its plain bytes
		// (they are decompressed out of them), so those go back to a
		// pool after the decode; an uncompressed one's keep theirs.
		var scratch *[]byte
		if compressed(b) {
			scratch = plainPool.Get().(*[]byte)
			defer plainPool.Put(scratch)
		}
		var dst []byte
		if scratch != nil {
			dst = *scratch
		}
		stored := b
		if b, err = openFrame(s, f, stored, dst); err != nil {
			if !checked {
				if bad := badCRC(stored); bad != nil {
					return nil, bad
				}
			}
			return nil, frameErr(s, f, err)
		}
		if scratch != nil && cap(b) <= maxPooledPlain {
			*scratch = b[:0]
		}
	}
	recs, err := s.dec.Decode(b, s.o.Mem)
	if err != nil {
		return nil, frameErr(s, f, err)
	}
	var rows int64
	for _, rec := range recs {
		rows += rec.NumRows()
	}
	if rows != f.Frame.Rows {
		release(recs)
		return nil, frameErr(s, f, fmt.Errorf("%w: %d rows decoded, manifest says %d", frame.ErrCorrupt, rows, f.Frame.Rows))
	}
	return slice(recs, f.Skip, f.Take), nil
}

// openFrame decrypts the encrypted frame b of f into a new buffer, as
// the worker and attempt that sealed it. A first-level object's frames
// are its worker's, and must carry its writer's write ID (the {write} of
// data-{write}-{n}.arrows) in their nonces: a frame of another writer of
// the same attempt fails too. A combined object's frames are opened as
// the first-level writer their nonce names, which its worker's
// encryption must list.
func openFrame(s *Stage, f spanFrame, b, dst []byte) ([]byte, error) {
	w := &s.m.Workers[f.Worker]
	id := frame.WriteID(b)
	got := hex.EncodeToString(id[:])
	worker, attempt := w.Worker, w.Attempt
	if ws := w.Encryption.Writers; len(ws) > 0 {
		i := slices.IndexFunc(ws, func(by manifest.SealedBy) bool { return by.Write == got })
		if i < 0 {
			return nil, fmt.Errorf("%w: the frame was sealed by writer %s, which the combined worker %s does not list", frame.ErrCorrupt, got, w.Worker)
		}
		worker, attempt = ws[i].Worker, ws[i].Attempt
	} else if want := manifest.WriteID(f.Key); want != got {
		return nil, fmt.Errorf("%w: the frame was sealed by writer %s, the object is writer %q's", frame.ErrCorrupt, got, want)
	}
	return s.open.OpenTo(dst, b, worker, attempt, f.Frame.Partition)
}

// plainPool keeps the buffers compressed frames are decrypted into, up
// to maxPooledPlain bytes each.
var plainPool = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledPlain = 16 << 20

// compressed reports whether the frame b's header names a compressing
// codec (its records are then decompressed out of its bytes).
func compressed(b []byte) bool {
	return len(b) >= frame.HeaderSize && frame.CodecName(b) != frame.None && frame.CodecName(b) != ""
}

// slice keeps rows [skip, skip+take) of recs (take < 0: to the end),
// releasing what it drops. Empty batches are dropped too.
func slice(recs []arrow.RecordBatch, skip, take int64) []arrow.RecordBatch {
	out := recs[:0]
	for _, rec := range recs {
		n := rec.NumRows()
		lo := min(skip, n)
		skip -= lo
		hi := n
		if take >= 0 {
			hi = min(n, lo+take)
			take -= hi - lo
		}
		switch {
		case lo == hi:
			rec.Release()
		case lo == 0 && hi == n:
			out = append(out, rec)
		default:
			out = append(out, rec.NewSlice(lo, hi))
			rec.Release()
		}
	}
	clear(recs[len(out):])
	return out
}

func release(recs []arrow.RecordBatch) {
	for _, rec := range recs {
		if rec != nil {
			rec.Release()
		}
	}
}
