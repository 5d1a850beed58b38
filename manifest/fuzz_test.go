package manifest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// manifestSeeds adds valid worker and stage manifests and hostile variants:
// wrong types, huge and negative numbers, frames past their object, deep
// nesting, other versions.
func manifestSeeds(f *testing.F) {
	f.Helper()
	w := sample()
	wb, _ := w.Encode()
	s, err := merge("q1", 2, []*Worker{sample()})
	if err != nil {
		f.Fatal(err)
	}
	s.Workers[0].Worker = "3"
	sb, _ := s.Encode()
	for _, b := range [][]byte{wb, sb} {
		f.Add(b)
		f.Add(b[:len(b)/2])
		for _, r := range []struct{ old, new string }{
			{`"format_version":"1.0"`, `"format_version":"2.0"`},
			{`"format_version":"1.0"`, `"format_version":"1.99999999999999999999"`},
			{`"partitions":4`, `"partitions":1099511627776`},
			{`"partitions":4`, `"partitions":-1`},
			{`"partitions":4`, `"partitions":1e400`},
			{`"offset":100`, `"offset":9223372036854775807`},
			{`"length":200`, `"length":9223372036854775807`},
			{`"size":300`, `"size":-300`},
			{`"object":0`, `"object":7`},
			{`"frames":[`, `"frames":[{},`},
			{`"kind":"worker"`, `"kind":"stage"`},
			{`"kind":"stage"`, `"kind":"worker"`},
			{`"query":"q1"`, `"query":"../q1"`},
			{`"key":"worker-3/attempt-a1/data-0.arrows"`, `"key":"../../other/data"`},
			{`"schema":"AQID"`, `"schema":"!!!"`},
			{`"workers":[`, `"workers":[null,`},
		} {
			if bytes.Contains(b, []byte(r.old)) {
				f.Add(bytes.Replace(b, []byte(r.old), []byte(r.new), 1))
			}
		}
	}
	f.Add([]byte(`{"format_version":"1.0","kind":"worker"}`))
	f.Add([]byte(`{"format_version":"1.0","kind":"stage","partitions":1,"workers":[{}]}`))
	f.Add([]byte(strings.Repeat("[", 10000)))
	f.Add([]byte(`{"format_version":1}`))
	f.Add([]byte("null"))
	f.Add([]byte{})
}

// decodeErr checks that a decode failure is classified.
func decodeErr(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
		t.Fatalf("error %v is neither ErrCorrupt nor ErrVersion", err)
	}
}

// safe checks what a reader relies on in a manifest that decoded: every
// frame inside its object, partitions in range and bounded, keys that do
// not climb out of the stage.
func safe(t *testing.T, w *Worker) {
	t.Helper()
	if w.Partitions < 1 || w.Partitions > MaxPartitions {
		t.Fatalf("decoded %d partitions", w.Partitions)
	}
	for i, f := range w.Frames {
		if f.Partition < 0 || f.Partition >= w.Partitions || f.Object < 0 || f.Object >= len(w.Objects) {
			t.Fatalf("frame %d: %+v outside the manifest", i, f)
		}
		o := w.Objects[f.Object]
		if f.Offset < 0 || f.Length <= 0 || f.Offset+f.Length > o.Size || f.Offset+f.Length < f.Offset {
			t.Fatalf("frame %d [%d, +%d) outside object of %d bytes", i, f.Offset, f.Length, o.Size)
		}
	}
	for _, o := range w.Objects {
		if strings.Contains(o.Key, "..") || o.Key == "" {
			t.Fatalf("object key %q", o.Key)
		}
	}
}

// FuzzDecodeWorker: DecodeWorker either fails with a classified error or
// returns a manifest that is safe to read with and that re-encodes to
// itself.
func FuzzDecodeWorker(f *testing.F) {
	manifestSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := DecodeWorker("fuzz", b)
		if err != nil {
			decodeErr(t, err)
			return
		}
		safe(t, w)
		again, err := w.Encode()
		if err != nil {
			t.Fatal(err)
		}
		w2, err := DecodeWorker("re-encoded", again)
		if err != nil {
			t.Fatalf("a decoded manifest does not decode again: %v", err)
		}
		if b2, _ := w2.Encode(); !bytes.Equal(again, b2) {
			t.Fatalf("round trip changed the manifest:\n%s\n%s", again, b2)
		}
	})
}

// FuzzDecodeStage: the same for stage manifests.
func FuzzDecodeStage(f *testing.F) {
	manifestSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeStage("fuzz", b)
		if err != nil {
			decodeErr(t, err)
			return
		}
		if s.Partitions < 1 || s.Partitions > MaxPartitions {
			t.Fatalf("decoded %d partitions", s.Partitions)
		}
		for i := range s.Workers {
			if s.Workers[i].Partitions != s.Partitions {
				t.Fatalf("worker %d has %d partitions, stage %d", i, s.Workers[i].Partitions, s.Partitions)
			}
			safe(t, &s.Workers[i])
		}
		again, err := s.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeStage("re-encoded", again); err != nil {
			t.Fatalf("a decoded stage does not decode again: %v", err)
		}
	})
}
