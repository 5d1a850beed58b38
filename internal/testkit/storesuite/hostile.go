package storesuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// Hostile damages a committed stage behind the reader's back, as a
// faulty disk, a broken proxy or a hand with write access would: a data
// object with one byte flipped, a data object cut short, a worker
// manifest and a stage manifest with one byte flipped. Each read is
// refused with the sentinel of its kind (reader.ErrChecksum,
// reader.ErrTruncated, manifest.ErrCorrupt) naming the object, and for a
// frame its offset and partition; no damaged row is ever delivered: what
// came before the refusal is every row of the frames before the damaged
// one, in order.
func Hostile(t *testing.T, tg Target) {
	cfg := config(t, "on")
	// Small frames: a few hundred rows make dozens of them.
	cfg.Write.FrameTargetBytes = 16 * durashuffle.KiB
	ev := newEnv(t, tg, cfg, nil)
	d := &damaged{ctx: context.Background(), ev: ev, q: "dmg"}
	sh := shape{workers: 2, partitions: 3, rows: 600, batchRows: 20}
	wrote, err := writeStage(d.ctx, ev.client, d.q, sh, false)
	if err != nil {
		t.Fatal(err)
	}
	d.all = wrote.partitionOrder(nil)
	d.frameDamage(t)
	t.Run("worker manifest tampered", func(t *testing.T) {
		d.manifestDamage(t, ev.client.Layout().WorkerManifestKey(d.q, 0, "0"))
	})
	if _, err := ev.client.Seal(d.ctx, d.q, 0, sh.workers); err != nil {
		t.Fatal(err)
	}
	t.Run("stage manifest tampered", func(t *testing.T) {
		d.manifestDamage(t, ev.client.Layout().StageManifestKey(d.q, 0))
	})
	d.restored(t, "the sealed stage restored")
}

// damaged is a committed stage that Hostile damages and restores, object
// by object, through a store beside the client's.
type damaged struct {
	ctx context.Context
	ev  *env
	q   string
	all []row // every row of the stage, in partition order
}

// put replaces object key with b.
func (d *damaged) put(t *testing.T, key string, b []byte) {
	t.Helper()
	if err := d.ev.direct.Put(d.ctx, key, b, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// readAll reads the whole stage and returns its rows up to the error.
func (d *damaged) readAll() ([]row, error) {
	s, err := d.ev.client.OpenStage(d.ctx, d.q, 0)
	if err != nil {
		return nil, err
	}
	recs, err := s.ReadPartitions(d.ctx, nil)
	if err != nil {
		return nil, err
	}
	return collect(recs)
}

// restored checks that the stage reads back whole.
func (d *damaged) restored(t *testing.T, what string) {
	t.Helper()
	got, err := d.readAll()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	sameRows(t, what, got, d.all)
}

// refused checks that err is sentinel and names key and each of more.
func refused(t *testing.T, err error, sentinel error, key string, more ...string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("read of the damaged stage: %v, want %v", err, sentinel)
	}
	for _, s := range append(more, key) {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

// frameDamage flips a byte of a frame, then cuts its object short, and
// checks each read stops at that frame with every row before it.
func (d *damaged) frameDamage(t *testing.T) {
	s, err := d.ev.client.OpenStage(d.ctx, d.q, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Worker 1's first object, at its last frame: cutting it there cuts
	// nothing a reader gets before the frame.
	w := s.Manifest().Workers[1]
	key := d.ev.client.Layout().ObjectKey(d.q, 0, w.Objects[0].Key)
	idx := 0
	for i, fr := range w.Frames {
		if fr.Object == 0 && fr.Offset > w.Frames[idx].Offset {
			idx = i
		}
	}
	f := w.Frames[idx]
	before := d.all[:rowsBefore(s.Manifest(), 1, idx)]
	orig := readAll(t, d.ev.direct, key)
	for _, tc := range []struct {
		name     string
		object   []byte
		sentinel error
		says     []string
	}{
		{"flipped byte", func() []byte {
			b := bytes.Clone(orig)
			b[f.Offset+f.Length/2] ^= 0x01
			return b
		}(), reader.ErrChecksum, []string{"checksum"}},
		{"truncated object", orig[:f.Offset+f.Length/3], reader.ErrTruncated, []string{"truncated", fmt.Sprintf("expected %d bytes", f.Length)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.put(t, key, tc.object)
			defer d.put(t, key, orig)
			got, err := d.readAll()
			refused(t, err, tc.sentinel, key, append(tc.says, fmt.Sprintf("offset %d", f.Offset), fmt.Sprintf("partition %d", f.Partition))...)
			var fe *reader.FrameError
			if !errors.As(err, &fe) || fe.Key != key || fe.Offset != f.Offset || fe.Partition != int(f.Partition) {
				t.Fatalf("error %v: want a FrameError naming %s offset %d partition %d", err, key, f.Offset, f.Partition)
			}
			sameRows(t, "rows before the refusal", got, before)
		})
	}
	d.restored(t, "the stage restored")
}

// manifestDamage flips a bit in manifest key and checks that the read is
// refused as corrupt, naming it, with no row delivered; the manifest is
// restored after.
func (d *damaged) manifestDamage(t *testing.T, key string) {
	b := readAll(t, d.ev.direct, key)
	tampered := bytes.Clone(b)
	tampered[len(b)/2] ^= 0x10
	d.put(t, key, tampered)
	defer d.put(t, key, b)
	got, err := d.readAll()
	refused(t, err, manifest.ErrCorrupt, key)
	if len(got) != 0 {
		t.Fatalf("%d rows delivered from a stage whose manifest %s is corrupt", len(got), key)
	}
}

// rowsBefore counts the rows a read of every partition of the unsealed
// stage m delivers before frame idx of worker w: partition by partition,
// worker by worker, frame by frame.
func rowsBefore(m *manifest.Stage, w, idx int) int {
	n := 0
	for p := range m.Partitions {
		for wi, wk := range m.Workers {
			for fi, f := range wk.Frames {
				if f.Partition != p {
					continue
				}
				if wi == w && fi == idx {
					return n
				}
				n += int(f.Rows)
			}
		}
	}
	panic(fmt.Sprintf("frame %d of worker %d is not in the manifest", idx, w))
}
