package bench

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"

	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/google/pprof/profile"
)

// Stages of a durashuffle writer's CPU, as cpu_by_stage names them, in
// the order the tables show them.
const (
	StageCodec    = "codec"
	StageCRC32C   = "crc32c"
	StageTLS      = "tls"
	StageHTTP     = "http"
	StageSpillIO  = "spill io"
	StageArena    = "arena copy"
	StageGather   = "gather"
	StageIPC      = "ipc"
	StageValidate = "validate"
	StageGC       = "gc"
	StageAlloc    = "alloc"
	StageOther    = "other"
	// StageInput is the harness feeding rows (and its thin wrappers
	// around the store): reported, but not the writer's CPU (see
	// Result.writerCPU).
	StageInput = "input"
)

// Stages lists every stage in table order: the writer's stages, then
// input.
var Stages = []string{StageCodec, StageCRC32C, StageTLS, StageHTTP, StageSpillIO, StageArena, StageGather,
	StageIPC, StageValidate, StageGC, StageAlloc, StageOther, StageInput}

const lib = "github.com/durashuffle/durashuffle"

// The packages whose functions the rules name, taken from their types,
// so that the rules follow a package that moves.
var (
	chunkerPkg = reflect.TypeFor[chunker.Writer]().PkgPath() + "."
	framePkg   = reflect.TypeFor[frame.Arena]().PkgPath() + "."
	// spill is internal to the library: named, as no type of it is
	// importable here.
	spillPkg = lib + "/internal/spill."
	arena    = framePkg + "(*Arena)."
	accum    = framePkg + "(*Accumulator)."
)

// stageRule gives a stage to the functions whose names start with one of
// prefixes, unless a function nearer the root starts with one of
// notUnder: then the function is passed over, as if no rule named it.
type stageRule struct {
	stage    string
	prefixes []string
	notUnder []string
}

// stageRules decide a profile sample's stage. Walking its stack from the
// leaf to the root (within an inlined location, from the innermost
// function out), the first function that a rule names decides; a
// function that several rules name belongs to the first of them in this
// table, and one its rule passes over (notUnder) leaves the decision to
// its callers. So the work is charged to the most specific thing doing
// it: lz4 under the frame encoder is codec, hash/crc32 under the AWS SDK
// is crc32c, a socket write under crypto/tls is http, mallocgc under the
// arena is alloc, a GC assist under mallocgc is gc. Functions no rule
// names (arrow-go outside its ipc package, os, internal/poll, syscall,
// runtime.memmove, ...) are charged to their callers: a system call to
// net (http) or to a spill file (spill io), arrow's bitmap copies to the
// Accumulator calling them (gather). The library's remaining code
// (routing rows, filling chunks, the upload pool) is other: its rule,
// last, stops the walk before the harness frames at the root of every
// writer goroutine, which would make it input.
var stageRules = []stageRule{
	{stage: StageCodec, prefixes: []string{"github.com/pierrec/lz4", "github.com/klauspost/compress"}},
	{stage: StageCRC32C, prefixes: []string{"hash/crc32."}},
	// The SDK's SigV4 hashing (SHA-256, HMAC) is signing: http.
	{stage: StageTLS, prefixes: []string{"crypto/", "vendor/golang.org/x/crypto/"}, notUnder: []string{"github.com/aws/"}},
	{stage: StageHTTP, prefixes: []string{"net.", "net/", "vendor/golang.org/x/net/", "golang.org/x/net/", "github.com/aws/"}},
	{stage: StageSpillIO, prefixes: []string{spillPkg}},
	{stage: StageArena, prefixes: []string{arena}},
	// An Arena is Accumulators in segments: its own copy is arena copy.
	{stage: StageGather, prefixes: []string{accum}, notUnder: []string{arena}},
	// Before ipc, which would take the frame package's validators.
	{stage: StageValidate, prefixes: []string{chunkerPkg + "validateBatch", chunkerPkg + "validate", framePkg + "validate"}},
	// The rest of the frame package, but not the helpers an Accumulator
	// copies with (growCol and the like), which are gather or arena copy.
	{stage: StageIPC, prefixes: []string{"github.com/apache/arrow-go/v18/arrow/ipc.", framePkg}, notUnder: []string{arena, accum}},
	{stage: StageInput, prefixes: []string{lib + "/cmd/durashuffle/internal/bench.", lib + "/internal/testkit/demo."}},
	// What the collector does, wherever it runs: background marking,
	// assists, sweeping, scavenging, write barriers.
	{stage: StageGC, prefixes: []string{"runtime.gcBgMarkWorker", "runtime.gcDrain", "runtime.gcAssistAlloc", "runtime.gcStart",
		"runtime.gcMarkDone", "runtime.gcMarkTermination", "runtime.gcWriteBarrier", "runtime.wbBufFlush", "runtime.bgsweep",
		"runtime.bgscavenge", "runtime.sweepone", "runtime.(*sweepLocked).sweep", "runtime._GC"}},
	// The allocator's own work, zeroing the memory it hands out included
	// (memclrNoHeapPointers under mallocgc), and growing a slice or a
	// bytes.Buffer: the new memory, its zeroing and the copy of the old
	// contents into it.
	{stage: StageAlloc, prefixes: []string{"runtime.mallocgc", "runtime.newobject", "runtime.makeslice", "runtime.growslice", "bytes.growSlice"}},
	{stage: StageOther, prefixes: []string{lib + ".", lib + "/"}},
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// stageOf is the stage of a stack of function names, leaf first (see
// stageRules).
func stageOf(stack []string) string {
	for i, fn := range stack {
		for _, r := range stageRules {
			if !hasPrefix(fn, r.prefixes) {
				continue
			}
			if under(stack[i+1:], r.notUnder) {
				break // passed over: its caller decides
			}
			return r.stage
		}
	}
	return StageOther
}

func under(callers []string, prefixes []string) bool {
	for _, fn := range callers {
		if hasPrefix(fn, prefixes) {
			return true
		}
	}
	return false
}

// sampleStack is a sample's function names, leaf first: each location's
// lines from the innermost inlined function out.
func sampleStack(s *profile.Sample) []string {
	var stack []string
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function != nil {
				stack = append(stack, l.Function.Name)
			}
		}
	}
	return stack
}

// cpuByStage divides cpu (the child's measured CPU seconds) among the
// stages in the proportions of p's CPU samples, so that the stages sum
// to cpu, and returns the seconds p sampled. A profile with no samples
// divides nothing (nil).
func cpuByStage(p *profile.Profile, cpu float64) (map[string]float64, float64, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, 0, fmt.Errorf("not a CPU profile: no cpu/nanoseconds sample type among %d", len(p.SampleType))
	}
	ns := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[idx]
		ns[stageOf(sampleStack(s))] += v
		total += v
	}
	if total == 0 {
		return nil, 0, nil
	}
	sampled := float64(total) / 1e9
	out := make(map[string]float64, len(ns))
	for st, v := range ns {
		// To the microsecond, not round3's millisecond: a dozen stages
		// rounded to the millisecond could miss cpu by more than 1%.
		out[st] = math.Round(float64(v)/1e9*cpu/sampled*1e6) / 1e6
	}
	return out, round3(sampled), nil
}

// divideCPU reads the child's CPU profile at path and sets CPUByStage
// and CPUProfileSeconds from it.
func (r *Result) divideCPU(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("CPU profile: %w", err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return fmt.Errorf("CPU profile %s: %w", path, err)
	}
	if r.CPUByStage, r.CPUProfileSeconds, err = cpuByStage(p, r.CPUSeconds); err != nil {
		return fmt.Errorf("CPU profile %s: %w", path, err)
	}
	return nil
}

// writerCPU is the child's CPU less the harness feeding it rows (the
// input stage): what the writer spent. 0 without stages.
func (r *Result) writerCPU() float64 {
	if len(r.CPUByStage) == 0 {
		return 0
	}
	return r.CPUSeconds - r.CPUByStage[StageInput]
}
