package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// stagedProfile builds a CPU profile from stacks (function names, leaf
// first; names joined by "+" are one location, innermost inlined
// function first), each sampled n times at 10 ms.
type stagedSample struct {
	n     int64
	stack []string
}

func stagedProfile(samples []stagedSample) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10e6,
	}
	funcs := map[string]*profile.Function{}
	fn := func(name string) *profile.Function {
		if f, ok := funcs[name]; ok {
			return f
		}
		f := &profile.Function{ID: uint64(len(funcs) + 1), Name: name}
		funcs[name] = f
		p.Function = append(p.Function, f)
		return f
	}
	for _, s := range samples {
		var locs []*profile.Location
		for _, l := range s.stack {
			loc := &profile.Location{ID: uint64(len(p.Location) + 1)}
			for _, name := range strings.Split(l, "+") {
				loc.Line = append(loc.Line, profile.Line{Function: fn(name)})
			}
			p.Location = append(p.Location, loc)
			locs = append(locs, loc)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{s.n, s.n * 10e6}})
	}
	return p
}

// TestCPUByStage: samples with known stacks land in known stages, scaled
// so that the stages sum to the measured CPU.
func TestCPUByStage(t *testing.T) {
	const (
		bench   = lib + "/cmd/durashuffle/internal/bench."
		frame   = "github.com/durashuffle/durashuffle/internal/frame."
		chunker = "github.com/durashuffle/durashuffle/chunker."
		sdk     = "github.com/aws/aws-sdk-go-v2/"
	)
	// The engine's writer path under the harness's feeding goroutine.
	write := []string{chunker + "(*Writer).Write", lib + ".(*Writer).Write", bench + "feedPool", bench + "writeWith.func1"}
	arenaAppend := append([]string{frame + "(*Accumulator).AppendRange", frame + "(*Accumulator).Append", frame + "(*Arena).Append"}, write...)
	encoder := []string{chunker + "encodeItems", chunker + "(*Writer).encoder"}
	gatherAppend := append([]string{frame + "(*Accumulator).AppendRange"}, encoder...)
	writeLoop := []string{"net/http.(*persistConn).writeLoop", "runtime.goexit"}
	stack := func(parts ...[]string) []string {
		var s []string
		for _, p := range parts {
			s = append(s, p...)
		}
		return s
	}
	samples := []stagedSample{
		// lz4 under the frame encoder: codec.
		{3, stack([]string{"github.com/pierrec/lz4/v4/internal/lz4block.CompressBlock", frame + "(*Encoder).compress", frame + "(*Encoder).Encode"}, encoder)},
		// hash/crc32 under the SDK's aws-chunked reader: crc32c.
		{1, stack([]string{"hash/crc32.castagnoliSSE42Triple", "hash/crc32.Update", sdk + "service/internal/checksum.(*computeChecksumReader).Read", "io.Copy"}, writeLoop)},
		// SHA-256 under the SDK's signer: signing, http.
		{1, []string{"crypto/internal/fips140/sha256.blockAVX2", "crypto/sha256.(*Digest).Write", sdk + "aws/signer/v4.(*Signer).SignHTTP", lib + "/internal/s3store.(*Store).UploadPart"}},
		// AES-GCM under crypto/tls: tls.
		{2, stack([]string{"crypto/internal/fips140/aes/gcm.gcmAesEnc", "crypto/tls.(*Conn).Write"}, writeLoop)},
		// A socket write under crypto/tls: http.
		{1, stack([]string{"syscall.Syscall", "internal/poll.(*FD).Write", "net.(*conn).Write", "crypto/tls.(*Conn).write", "crypto/tls.(*Conn).Write"}, writeLoop)},
		// The Accumulator's copy helper under the arena: arena copy.
		{2, stack([]string{"runtime.memmove", frame + "(*growCol).append"}, arenaAppend)},
		// The same under the encoder's gatherer, and arrow's bitmap copy
		// it calls: gather.
		{1, stack([]string{"runtime.memmove", frame + "(*growCol).append"}, gatherAppend)},
		{1, stack([]string{"github.com/apache/arrow-go/v18/arrow/bitutil.CopyBitmap", frame + "(*growCol).append"}, gatherAppend)},
		// Arrow's IPC writer under the encoder: ipc.
		{1, stack([]string{"runtime.memmove", "github.com/apache/arrow-go/v18/arrow/ipc.(*Writer).Write", frame + "(*Encoder).Encode"}, encoder)},
		// Zeroing inlined into mallocgc (one location) under the arena's
		// growth: alloc.
		{1, stack([]string{"runtime.memclrNoHeapPointers+runtime.mallocgc", "runtime.growslice", frame + "(*growCol).append"}, arenaAppend)},
		// A bytes.Buffer zeroing the room it grew by, under the encoder:
		// alloc.
		{1, stack([]string{"runtime.memclrNoHeapPointers", "bytes.growSlice", "bytes.(*Buffer).grow", "bytes.(*Buffer).Grow", frame + "(*Encoder).compress", frame + "(*Encoder).Encode"}, encoder)},
		// A GC assist under mallocgc, and the background mark worker: gc.
		{1, stack([]string{"runtime.scanobject", "runtime.gcDrainN", "runtime.gcAssistAlloc1", "runtime.gcAssistAlloc", "runtime.mallocgc", "runtime.growslice", frame + "(*growCol).append"}, arenaAppend)},
		{1, []string{"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker.func2", "runtime.systemstack"}},
		// The chunker's own work under the harness's goroutine: other,
		// not input; the scheduler: other.
		{2, stack([]string{"runtime.memmove"}, write)},
		{2, []string{"runtime.futex", "runtime.findRunnable", "runtime.schedule", "runtime.mcall"}},
		// The harness slicing its input: input.
		{2, []string{"github.com/apache/arrow-go/v18/arrow/array.NewSlice", bench + "feedPool", bench + "writeWith.func1"}},
		// Validation of a batch, arrow accessors below: validate.
		{1, stack([]string{"github.com/apache/arrow-go/v18/arrow/array.(*String).ValueOffsets", chunker + "validateOffsets[...]", chunker + "validateColumn", chunker + "validateBatch"}, write)},
		// A spill file's write system call: spill io.
		{1, []string{"syscall.Syscall", "internal/poll.(*FD).Write", "os.(*File).Write", lib + "/internal/spill.(*File).Append", chunker + "(*Writer).flushRun"}},
	}
	p := stagedProfile(samples)
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// 25 samples of 10 ms: 0.25 s sampled; the child measured 0.5 s, so
	// every sample counts 20 ms.
	r := &Result{CPUSeconds: 0.5}
	if err := r.divideCPU(path); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		StageCodec: 0.06, StageCRC32C: 0.02, StageHTTP: 0.04, StageTLS: 0.04, StageArena: 0.04, StageGather: 0.04,
		StageIPC: 0.02, StageAlloc: 0.04, StageGC: 0.04, StageOther: 0.08, StageInput: 0.04, StageValidate: 0.02, StageSpillIO: 0.02,
	}
	if r.CPUProfileSeconds != 0.25 {
		t.Errorf("profile sampled %.3f s, want 0.25", r.CPUProfileSeconds)
	}
	if len(r.CPUByStage) != len(want) {
		t.Errorf("stages %v, want %v", r.CPUByStage, want)
	}
	var sum float64
	for st, s := range want {
		if got := r.CPUByStage[st]; got != s {
			t.Errorf("%s: %.3f s, want %.3f", st, got, s)
		}
		sum += r.CPUByStage[st]
	}
	if round3(sum) != 0.5 {
		t.Errorf("stages sum to %.3f s, want the measured 0.5", sum)
	}
	if w := round3(r.writerCPU()); w != 0.46 {
		t.Errorf("writer CPU %.3f s, want 0.5 less 0.04 of input", w)
	}

	// A heap profile is not divided.
	heap := &profile.Profile{SampleType: []*profile.ValueType{{Type: "inuse_space", Unit: "bytes"}}}
	if _, _, err := cpuByStage(heap, 1); err == nil || !strings.Contains(err.Error(), "not a CPU profile") {
		t.Errorf("heap profile: %v", err)
	}
	// Nor a profile without samples.
	if m, s, err := cpuByStage(stagedProfile(nil), 1); m != nil || s != 0 || err != nil {
		t.Errorf("empty profile: %v, %v, %v", m, s, err)
	}
}
