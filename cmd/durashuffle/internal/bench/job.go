package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/reqs"
)

// Contender names, as they appear in results.
const (
	Durashuffle = "durashuffle"
	// DurashuffleByPartition reads the stage partition by partition,
	// Readers partitions at a time (bench read).
	DurashuffleByPartition = "durashuffle-by-partition"
	// DurashuffleAuto is durashuffle's writer with compression auto.
	DurashuffleAuto = "durashuffle-auto"
	Sequential      = "sequential"
	TransferManager = "transfermanager"
	Manager         = "manager"

	// DurashuffleSpillOff is durashuffle's writer with spill off: runs
	// uploaded as they flush, while the input still comes (bench write).
	DurashuffleSpillOff = "durashuffle-spill-off"
	// DurashuffleEncrypted is durashuffle with client-side encryption:
	// every frame sealed with AES-256-GCM under a key of the run's own
	// (bench write), and the stage read back with it (bench read).
	DurashuffleEncrypted = "durashuffle-encrypted"
	// DurashuffleEncodeOnly is durashuffle's writer on the null store:
	// everything but the upload, whose CPU bench write finds as
	// durashuffle's less this one's.
	DurashuffleEncodeOnly = "durashuffle-encode-only"
)

// Job is one contender's run, handed to a child process as JSON.
type Job struct {
	Kind     string             `json:"kind"` // write, read, encode-files
	Name     string             `json:"name"` // durashuffle, sequential, transfermanager
	Endpoint string             `json:"endpoint"`
	Dial     string             `json:"dial"` // the link's address, "" to dial the endpoint
	Bucket   string             `json:"bucket"`
	Embedded bool               `json:"embedded"` // fixed credentials, no signature checks
	Config   durashuffle.Config `json:"config"`
	Data     Data               `json:"data"`
	Query    string             `json:"query"`
	// NullStore discards every upload: the CPU side alone.
	NullStore bool `json:"null_store"`
	// Readers is how many partitions the durashuffle reader streams at once.
	Readers int `json:"readers"`
	// Files and Keys: transfermanager uploads Files[i] as Keys[i];
	// encode-files writes the encoded streams to Files.
	Files []string `json:"files,omitempty"`
	Keys  []string `json:"keys,omitempty"`
	// Fan, when set, makes the job a contender of bench fan (see
	// runFanJob).
	Fan *FanJob `json:"fan,omitempty"`
	// Conns is the link's connection count; 0 means upload_concurrency.
	Conns int `json:"conns"`
	// GOMAXPROCS of the child; 0 leaves the runtime's default.
	Procs int `json:"procs,omitempty"`
	// CPUProfile, if set, is where the child writes its CPU profile.
	CPUProfile string `json:"cpu_profile,omitempty"`
	// StageProfile makes the CPU profile cover the clock alone
	// (startClock to stopClock), the span cpu_seconds measures, and the
	// parent divide cpu_seconds by stage from it (Result.CPUByStage).
	StageProfile bool `json:"stage_profile,omitempty"`
	// MemProfile, if set, is where the child writes a heap profile taken
	// at its highest live heap (see StartPeakHeapProfile).
	MemProfile string `json:"mem_profile,omitempty"`
	// The durashuffle contenders' children apply Config.Write.MemoryLimit as
	// durashuffle write does (see applyMemoryLimit); the others run with
	// the Go runtime's defaults.

	// ProgressFD, if positive, is a descriptor the child writes a Sample
	// to every sampleEvery (see Runner.Watch).
	ProgressFD int `json:"progress_fd,omitempty"`

	// Round is where the job stands among its scenario's runs; nil for a
	// scenario's preparation (the data set encoded to files, the stage to
	// read). The parent's business only.
	Round *Round `json:"-"`
	// live counts what the child moves, when it reports progress.
	live *liveMeter
}

// httpClient is the job's HTTP client on the link (see HTTPClient), TLS
// trusting Config.Store.CAFile.
func (j *Job) httpClient() (*http.Client, *http.Transport, error) {
	tc, err := clientTLS(j.Config.Store.CAFile, j.Config.Store.InsecureSkipVerify)
	if err != nil {
		return nil, nil, err
	}
	hc, tr := HTTPClient(j.Dial, j.conns(), tc)
	return hc, tr, nil
}

func (j *Job) conns() int {
	if j.Conns > 0 {
		return j.Conns
	}
	return j.Config.Write.UploadConcurrency
}

// Result is one contender's measurement (one round) or, in a report, the
// median of its rounds.
type Result struct {
	Name             string  `json:"name"`
	Seconds          float64 `json:"seconds"`
	StoredBytesPerS  float64 `json:"stored_bytes_per_s"`
	LogicalBytesPerS float64 `json:"logical_bytes_per_s"`
	PeakRSSBytes     int64   `json:"peak_rss_bytes"`
	// FileRSSBytes: of the resident set when the job ended, the pages of
	// mapped files (the binary), which no Go memory limit governs.
	FileRSSBytes int64            `json:"file_rss_bytes,omitempty"`
	Requests     map[string]int64 `json:"requests"`
	// PutPerGiB is the PUT-class requests (store.PutRequests) per GiB
	// stored: what a write costs in requests.
	PutPerGiB float64 `json:"put_requests_per_gib,omitempty"`

	StoredBytes  int64 `json:"stored_bytes"`
	LogicalBytes int64 `json:"logical_bytes"`
	Rows         int64 `json:"rows,omitempty"`
	Frames       int   `json:"frames,omitempty"`
	// Codecs counts the frames written per codec (the manifests'):
	// compression auto's mix.
	Codecs  map[string]int `json:"codecs,omitempty"`
	Objects int            `json:"objects,omitempty"`
	// PeakBufferedChunks is the upload pool's high-water mark: equal to
	// max_buffered_chunks when the link, not the encoder, was the limit.
	PeakBufferedChunks int64 `json:"peak_buffered_chunks,omitempty"`
	// FirstDataSeconds is when the first part (or ranged GET) started,
	// from the start of the run: the pipeline's fill time. DataSeconds is
	// from then to the end of the last one, and DataBytesPerS the stored
	// bytes over it: the rate while the contender used the link.
	FirstDataSeconds float64 `json:"first_data_seconds,omitempty"`
	DataSeconds      float64 `json:"data_seconds,omitempty"`
	DataBytesPerS    float64 `json:"data_bytes_per_s,omitempty"`
	// InputSeconds is when the input ended (the last writer called
	// Commit), from the start of the run; LastDataStartSeconds when the
	// last data request started and LastDataSeconds when the last one
	// ended. A spilling writer uploads after its input: the time from
	// InputSeconds to FirstDataSeconds is its wait for the first part,
	// and from LastDataStartSeconds on its last part's straggle.
	// DataInFlight is the data requests' mean count in flight from the
	// first to the last (their durations summed over the span): a link
	// of upload_concurrency connections kept busy carries that many.
	InputSeconds         float64 `json:"input_seconds,omitempty"`
	LastDataStartSeconds float64 `json:"last_data_start_seconds,omitempty"`
	LastDataSeconds      float64 `json:"last_data_seconds,omitempty"`
	DataInFlight         float64 `json:"data_in_flight,omitempty"`
	// UploadLinkFraction is DataBytesPerS over the link limit (the upload
	// phase, first data byte to last); AfterInputLinkFraction is the
	// stored bytes over the time from the input's end to the write's, over
	// the link limit: 0.95 means the write took its input phase plus the
	// stored bytes at 0.95 of the link.
	UploadLinkFraction     float64 `json:"upload_link_fraction,omitempty"`
	AfterInputLinkFraction float64 `json:"after_input_link_fraction,omitempty"`
	// MeanGetBytes is the stored bytes per ranged GET; GetCeiling what a
	// connection can carry with GETs of that size: size / (size + round
	// trip x bandwidth), the read's physical ceiling as a fraction of the
	// link limit.
	MeanGetBytes float64 `json:"mean_get_bytes,omitempty"`
	GetCeiling   float64 `json:"get_ceiling,omitempty"`
	RangedGets   int64   `json:"ranged_gets,omitempty"`
	ManifestGets int64   `json:"manifest_gets,omitempty"` // the stage manifest and ranged GETs of its index
	// InputBytes is the input pool's size, or with fresh input what the
	// row generators hold (freshInputBytes): the engine's memory.
	InputBytes int64     `json:"input_pool_bytes,omitempty"`
	Rounds     []float64 `json:"round_seconds,omitempty"`
	GoHeapPeak int64     `json:"go_heap_peak_bytes,omitempty"`
	// RusageMaxRSS is the child's ru_maxrss as wait4 reports it, kept for
	// comparison: see peakRSS for why it is not the peak RSS.
	RusageMaxRSS int64 `json:"rusage_maxrss_bytes,omitempty"`
	// CPUSeconds is the child's CPU on the clock (see startClock);
	// ProcessCPUSeconds all of it, input generation included.
	CPUSeconds        float64  `json:"cpu_seconds,omitempty"`
	ProcessCPUSeconds float64  `json:"process_cpu_seconds,omitempty"`
	LinkFraction      float64  `json:"link_fraction,omitempty"` // stored bytes/s over the link limit
	Keys              []string `json:"keys,omitempty"`          // data objects written
	ChunkSize         int64    `json:"chunk_size,omitempty"`
	Concurrency       int      `json:"upload_concurrency,omitempty"`
	MaxBuffered       int      `json:"max_buffered_chunks,omitempty"`
	MemoryBound       int64    `json:"memory_bound_bytes,omitempty"`
	WriteRows         int      `json:"write_rows,omitempty"`
	EncodeWriters     int      `json:"writers,omitempty"`
	// Runs is the sorted runs of the written objects as stored (see
	// sortedRuns). DataGets and MetadataGets are a reader's GETs of data
	// objects and of everything else, with the bytes their bodies carried.
	Runs          int   `json:"runs,omitempty"`
	DataGets      int64 `json:"data_gets,omitempty"`
	DataGetBytes  int64 `json:"data_get_bytes,omitempty"`
	MetadataGets  int64 `json:"metadata_gets,omitempty"`
	MetadataBytes int64 `json:"metadata_bytes,omitempty"`
	// LocalDiskBytes is the most a writer had on local disk at once
	// (bench fan: durashuffle's spill files, the druid and map-file
	// writers' runs and map files).
	LocalDiskBytes int64 `json:"local_disk_bytes,omitempty"`

	// CPUByStage divides CPUSeconds among the stages of the write path
	// (codec, crc32c, tls, ..., input; see stageRules) in the proportions
	// of the child's CPU profile over its clock, so that the stages sum
	// to CPUSeconds; CPUProfileSeconds is what that profile sampled. Set
	// for jobs with StageProfile.
	CPUByStage        map[string]float64 `json:"cpu_by_stage,omitempty"`
	CPUProfileSeconds float64            `json:"cpu_profile_seconds,omitempty"`
}

func (r *Result) finish(d time.Duration) {
	if clockCPU > 0 && r.CPUSeconds == 0 {
		r.CPUSeconds = round3(clockCPU)
	}
	r.Seconds = d.Seconds()
	r.PutPerGiB = reqs.PerGiB(reqs.PutRequests(r.Requests), r.StoredBytes)
	if r.Seconds > 0 {
		r.StoredBytesPerS = float64(r.StoredBytes) / r.Seconds
		r.LogicalBytesPerS = float64(r.LogicalBytes) / r.Seconds
	}
}

// clockCPU is the child's CPU seconds (user + system) between
// startClock and stopClock: what its contender spent on the clock,
// without the input pool built before it or the untimed work after.
var (
	clockCPU0 float64
	clockCPU  float64
)

// clockProfile, for a job with StageProfile, is the file its CPU profile
// goes to from startClock to stopClock; clockProfiling says the profile
// runs, clockProfileErr why it could not start.
var (
	clockProfile    *os.File
	clockProfiling  bool
	clockProfileErr error
)

// startClock starts a contender's clock and notes the CPU used so far
// (after starting the clock's CPU profile, so that its start is not on
// the clock).
func startClock() time.Time {
	if clockProfile != nil && !clockProfiling {
		if err := pprof.StartCPUProfile(clockProfile); err != nil {
			clockProfileErr = err
		} else {
			clockProfiling = true
		}
	}
	clockCPU0 = processCPU()
	return time.Now()
}

// stopClock returns the time since start and notes the CPU used since;
// then it stops the clock's CPU profile, whose writing is not on the
// clock.
func stopClock(start time.Time) time.Duration {
	d := time.Since(start)
	clockCPU = processCPU() - clockCPU0
	stopClockProfile()
	return d
}

func stopClockProfile() {
	if clockProfiling {
		pprof.StopCPUProfile()
		clockProfiling = false
	}
}

// processCPU is this process's user + system CPU seconds so far.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
}

// ChildEnv, when set to 1 in a process's environment, makes the bench
// package's test binary act as a child (see RunChild).
const ChildEnv = "DURASHUFFLE_BENCH_CHILD"

// RunChild runs the Job read from stdin and writes its Result to stdout:
// the body of the hidden `durashuffle bench child` command.
func RunChild(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	var j Job
	if err := json.NewDecoder(stdin).Decode(&j); err != nil {
		return fmt.Errorf("bench child: decode job: %w", err)
	}
	if j.Procs > 0 {
		runtime.GOMAXPROCS(j.Procs)
	}
	if err := applyMemoryLimit(&j); err != nil {
		return fmt.Errorf("bench child: %w", err)
	}
	whole := j.CPUProfile
	if j.StageProfile {
		f, err := os.Create(j.CPUProfile)
		if err != nil {
			return fmt.Errorf("bench child: CPU profile: %w", err)
		}
		defer f.Close()
		clockProfile, whole = f, ""
		defer stopClockProfile()
	}
	stopProfile, err := StartCPUProfile(whole)
	if err != nil {
		return err
	}
	defer stopProfile()
	stopHeap, err := StartPeakHeapProfile(j.MemProfile)
	if err != nil {
		return err
	}
	if j.ProgressFD > 0 {
		stop := j.startReporting()
		defer stop()
	}
	r, err := runJob(ctx, &j)
	if herr := stopHeap(); err == nil && herr != nil {
		err = herr
	}
	if err == nil && clockProfileErr != nil {
		err = fmt.Errorf("CPU profile of the clock: %w", clockProfileErr)
	}
	if err != nil {
		return fmt.Errorf("bench child %s %s: %w", j.Kind, j.Name, err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.GoHeapPeak = int64(ms.HeapSys)
	r.PeakRSSBytes = peakRSS()
	r.FileRSSBytes = fileRSS()
	return json.NewEncoder(stdout).Encode(r)
}

// applyMemoryLimit sets a durashuffle contender's soft memory limit from
// its configuration's memory_limit, as durashuffle write sets its own: a
// process of Data.Workers writers, or of Readers partition streams. The
// input is the engine's memory, not durashuffle's: like an engine
// embedding durashuffle would, the child adds it to the limit auto
// derives: the pool (generated here, once, before anything is timed), or
// with fresh input what the row generators hold (their per-partition
// builders: 0.6 MiB at 64 partitions, 200 MiB per writer at 8192).
func applyMemoryLimit(j *Job) error {
	if !strings.HasPrefix(j.Name, Durashuffle) && j.Name != FanSpillOff {
		return nil
	}
	load := durashuffle.MemoryLoad{Writers: max(1, j.Data.Workers)}
	if j.Kind == "read" {
		load = durashuffle.MemoryLoad{Readers: max(1, j.Readers)}
	}
	cfg := j.Config
	if cfg.Write.MemoryLimit == durashuffle.MemoryLimitAuto && j.Kind != "read" {
		pool, err := prepareInput(j)
		if err != nil {
			return err
		}
		cfg.Write.MemoryLimit = durashuffle.MemoryLimit(cfg.SoftMemoryLimit(load) + durashuffle.Size(pool))
	}
	cfg.ApplyMemoryLimit(load, os.Getenv)
	return nil
}

// peakRSS is this process's own resident-set high-water mark (VmHWM in
// /proc/self/status), 0 where there is no such file. ru_maxrss is not
// used for it: on Linux, exec folds the RSS high-water mark of the
// process image it replaces into the new image's ru_maxrss
// (setmax_mm_hiwater_rss in fs/exec.c), and Go starts children with
// clone(CLONE_VM|CLONE_VFORK), whose image before exec is the parent's
// memory, so every child's ru_maxrss would be at least the parent's peak,
// server and stored objects included.
func peakRSS() int64 { return procStatus("VmHWM:") }

// fileRSS is the resident pages of this process that are mapped files
// (RssFile: the binary's text and data it has touched), which no Go
// memory limit governs.
func fileRSS() int64 { return procStatus("RssFile:") }

// procStatus reads a kB field of /proc/self/status in bytes (0 where
// there is none).
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return n * 1024
				}
			}
		}
	}
	return 0
}

func runJob(ctx context.Context, j *Job) (*Result, error) {
	switch {
	case j.Fan != nil:
		return runFanJob(ctx, j)
	case j.Kind == "encode-files":
		return encodeFiles(ctx, j)
	case j.Kind == "write" && (j.Name == Durashuffle || j.Name == DurashuffleAuto || j.Name == DurashuffleSpillOff || j.Name == DurashuffleEncodeOnly || j.Name == DurashuffleEncrypted):
		return writeDurashuffle(ctx, j)
	case j.Kind == "write" && j.Name == Sequential:
		return writeSequential(ctx, j)
	case j.Kind == "write" && j.Name == TransferManager:
		return writeTM(ctx, j)
	case j.Kind == "write" && j.Name == Manager:
		return writeManager(ctx, j)
	case j.Kind == "write" && j.Name == AzBlob:
		return writeAzBlob(ctx, j)
	case j.Kind == "write" && j.Name == GCSClient:
		return writeGCSClient(ctx, j)
	case j.Kind == "read" && (j.Name == Durashuffle || j.Name == DurashuffleByPartition || j.Name == DurashuffleEncrypted):
		return readDurashuffle(ctx, j)
	case j.Kind == "read" && j.Name == DurashuffleRanges:
		return readRanges(ctx, j)
	case j.Kind == "read" && j.Name == TransferManager:
		return readTM(ctx, j)
	case j.Kind == "read" && j.Name == Manager:
		return readManager(ctx, j)
	case j.Kind == "read" && j.Name == AzBlob:
		return readAzBlob(ctx, j)
	case j.Kind == "read" && j.Name == GCSClient:
		return readGCSClient(ctx, j)
	}
	return nil, fmt.Errorf("unknown job %s/%s", j.Kind, j.Name)
}

// Runner starts child processes: Command is the argv that runs RunChild
// (`durashuffle bench child`, or a test binary with ChildEnv=1).
type Runner struct {
	Command []string
	Env     []string
	Stderr  io.Writer
	// CPUProfile, if set, makes every child write a CPU profile to
	// CPUProfile.<kind>-<name>-<n> (of its clock alone for a job with
	// StageProfile, whose profile is kept there rather than removed
	// once read); MemProfile likewise a heap profile at the child's
	// highest live heap.
	CPUProfile string
	MemProfile string
	// Watch, if set, is told about every child and gets its samples.
	Watch Watcher
	runs  int
}

// Run runs j in a fresh child process and returns its Result with the
// child's peak RSS (getrusage's ru_maxrss: the high-water mark of the
// child's resident set, KiB on Linux) and CPU time.
func (rn *Runner) Run(ctx context.Context, j *Job) (*Result, error) {
	if rn.Watch == nil {
		return rn.run(ctx, j)
	}
	rn.Watch.Started(j)
	r, err := rn.run(ctx, j)
	rn.Watch.Finished(j, r)
	return r, err
}

func (rn *Runner) run(ctx context.Context, j *Job) (*Result, error) {
	if rn.CPUProfile != "" || rn.MemProfile != "" {
		rn.runs++
	}
	if rn.CPUProfile != "" {
		j.CPUProfile = fmt.Sprintf("%s.%s-%s-%d", rn.CPUProfile, j.Kind, j.Name, rn.runs)
	} else if j.StageProfile {
		// Taken for the stages alone (see Env.staged).
		defer os.Remove(j.CPUProfile)
	}
	if rn.MemProfile != "" {
		j.MemProfile = fmt.Sprintf("%s.%s-%s-%d", rn.MemProfile, j.Kind, j.Name, rn.runs)
	}
	if rn.Watch != nil {
		j.ProgressFD = 3 // ExtraFiles[0], the pipe below
	}
	in, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, rn.Command[0], rn.Command[1:]...)
	cmd.Env = append(os.Environ(), rn.Env...)
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	var samples *os.File
	if rn.Watch != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("%s %s child: progress pipe: %w", j.Kind, j.Name, err)
		}
		samples, cmd.ExtraFiles = r, []*os.File{w}
	}
	err = cmd.Start()
	if samples != nil {
		// The child has its own copy of the write end once started:
		// closing ours lets the reader see the end when the child exits.
		cmd.ExtraFiles[0].Close()
		if err != nil {
			samples.Close()
		} else {
			read := make(chan struct{})
			go func() {
				defer close(read)
				rn.readSamples(j, samples)
			}()
			defer func() { <-read }()
		}
	}
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		if rn.Stderr != nil {
			rn.Stderr.Write(errb.Bytes())
		}
		return nil, fmt.Errorf("%s %s child: %w: %s", j.Kind, j.Name, err, lastLine(errb.String()))
	}
	var r Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("%s %s child: decode result %q: %w", j.Kind, j.Name, out.String(), err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.RusageMaxRSS = ru.Maxrss * 1024
		r.ProcessCPUSeconds = tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
		if r.CPUSeconds == 0 {
			r.CPUSeconds = r.ProcessCPUSeconds
		}
		if r.PeakRSSBytes == 0 {
			r.PeakRSSBytes = r.RusageMaxRSS
		}
	}
	if j.StageProfile {
		if err := r.divideCPU(j.CPUProfile); err != nil {
			return nil, fmt.Errorf("%s %s child: %w", j.Kind, j.Name, err)
		}
	}
	return &r, nil
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

func lastLine(s string) string {
	b := bytes.TrimSpace([]byte(s))
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}
