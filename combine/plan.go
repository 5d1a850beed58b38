package combine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// Defaults of Options.
const (
	// DefaultTargetGetBytes is K, the GET size the plan sizes buckets and
	// groups for: large enough that a GET's time is spent moving bytes,
	// small enough that a task's inputs arrive in many GETs at once.
	DefaultTargetGetBytes = 32 << 20
	// DefaultTaskCapBytes bounds a task's bytes without Scratch: a task
	// holds all of its input in memory (frames arrive writer by writer
	// and leave partition by partition), so this is its memory.
	DefaultTaskCapBytes = 512 << 20
	// DefaultDiskTaskCapBytes bounds a task's bytes given Scratch (with
	// spill on, Client.Combine gives spill_dir): a task over MemoryBytes
	// lays its object out on disk, so this is its disk. Two tasks at a
	// time fill the default spill_bytes of 32 GiB (RunAll runs no more
	// tasks on disk at once than ScratchBytes holds). Larger tasks mean
	// fewer of them, and fewer GETs: a stage of B bytes needs at least B
	// / cap tasks, and its tasks' and readers' GETs are at least 2 x
	// sqrt(W x R x B / cap).
	DefaultDiskTaskCapBytes = 16 << 30
	// DefaultPartBytes is the largest part of a combined object's
	// multipart upload held in memory (one PutObject when the object is
	// no larger than its part size). Parts are PUTs, which cost 12.5
	// times a GET: at 16 MiB the parts of 1 TiB would cost more than the
	// GETs that combining saves at 1,000 x 1,000.
	DefaultPartBytes = 128 << 20
	// DefaultDiskPartBytes is the largest part of a combined object laid
	// out on disk: a part is a section of the task's file, so its size
	// costs no memory, and a task of the disk cap is 16 parts, on 16
	// connections at once. Every request, a retry's too, sends its part
	// whole within the store's request timeout: 1 GiB in 5 minutes needs
	// 3.4 MiB/s per connection.
	DefaultDiskPartBytes = 1 << 30
	// fetches is the ranged GETs a task keeps in flight. A task
	// moves its bytes twice, in and out, where a reader moves them once,
	// so it takes more connections than a reader's read_ahead: the
	// connections of eight readers. Tasks run side by side share the
	// store client's connections (requests past them wait for one, and
	// the first-byte timeout starts once a request is sent). Each GET
	// reads into the task's one buffer, so they cost no memory.
	fetches = 32
	// defaultUploads is the parts of a task's object in flight: as many
	// connections as its GETs use. A plan of fewer tasks than this cuts
	// its objects in this many parts (see Plan.partBytes). Parts are
	// slices of the task's bytes, so they cost no memory.
	defaultUploads = 32
	// DefaultMemoryBytes is the largest task held in memory when the
	// plan has Scratch for larger ones.
	DefaultMemoryBytes = 512 << 20
	// defaultGapBytes: frames of a bucket at most this many bytes apart
	// in a writer object share one GET (the gap is read and dropped), as
	// the reader's read_gap_bytes.
	defaultGapBytes = reader.DefaultGapBytes
	// readerRangeBytes and readerReadAhead are the reader's defaults
	// (read_range_bytes, read_ahead), for the predictions.
	readerRangeBytes = reader.DefaultRangeBytes
	readerSpanBytes  = reader.DefaultSpanBytes
	readerReadAhead  = reader.DefaultReadAhead
	// readerMinSpan is the reader's smallest GET when it spreads a
	// partition over read_ahead connections.
	readerMinSpan = 1 << 20
)

// Options tune a plan. The zero value means the defaults.
type Options struct {
	// TargetGetBytes is K, the GET size to aim for (default 32 MiB).
	// Unset, given Scratch, a plan whose tasks at K would be laid out on
	// disk (over MemoryBytes) aims instead at the fewest tasks under the
	// disk cap: a task on disk costs its parts, create, complete and
	// manifest whatever its size, and its memory is a few buffers, so
	// the largest tasks the cap allows cost the fewest requests.
	TargetGetBytes int64
	// TaskCapBytes bounds the bytes of one task, and so its memory
	// (default 512 MiB), or given Scratch its disk (default 16 GiB,
	// DefaultDiskTaskCapBytes). Buckets and groups are raised until each task's
	// share of the stage is under it; a single partition of one writer
	// larger than the cap still makes a task of its own.
	TaskCapBytes int64
	// Readers is R, the readers expected to read the stage, each a
	// contiguous range of partitions of equal count (default: one per
	// partition).
	Readers int
	// Groups and Buckets force G and J (0: sized from the bytes).
	Groups, Buckets int
	// ReaderRangeBytes, ReaderSpanBytes and ReaderReadAhead are the
	// readers' read_range_bytes, read_span_bytes and read_ahead, for the
	// predictions (defaults 8 MiB, 64 MiB and 4).
	ReaderRangeBytes int64
	ReaderSpanBytes  int64
	ReaderReadAhead  int
	// PartBytes is the part size of a combined object (default 128 MiB
	// in memory and 1 GiB on disk, DefaultDiskPartBytes; at least S3's 5
	// MiB). A plan of fewer tasks than Uploads cuts its objects in about
	// Uploads parts of at most this, none under 5 MiB but the last.
	PartBytes int64
	// Uploads is the parts of a task's object in flight (default 32).
	// They are slices of the task's input, which is the combined object
	// already in its order: a task holds its bytes once.
	Uploads int
	// MemoryBytes: a task of at most this many bytes holds them in
	// memory (default 512 MiB). A larger one, given Scratch, lays its
	// object out in a file there instead and uploads it from the file in
	// at least two parts: its memory is then a few buffers, and
	// TaskCapBytes bounds its disk.
	MemoryBytes int64
	// Scratch is local disk for tasks of more than MemoryBytes
	// (Client.Combine gives the client's spill_dir, with spill on).
	// Without it every task holds its bytes in memory, and TaskCapBytes
	// is its memory.
	Scratch Scratch
	// ScratchBytes is the most bytes Scratch holds at once (spill_bytes,
	// given by Client.Combine; 0: no bound): RunAll starts a task on disk
	// only when the expected bytes of those running fit in it, however
	// many tasks it may run at once.
	ScratchBytes int64
	// GapBytes: frames of a bucket at most this far apart in a writer
	// object share one GET (default 256 KiB; negative: only adjacent
	// frames).
	GapBytes int64
	// Expected, when set, plans a stage whose writers may still be
	// running, from what the engine expects rather than from the sealed
	// stage: Partitions, the stage's N workers (one entry each, with the
	// sizes of the objects it expects each to write; IDs are not used)
	// and, if the engine knows them, each partition's bytes
	// (PartitionBytes; nil spreads the workers' bytes evenly). The plan
	// fixes the buckets and the groups' sizes before any writer commits,
	// and every process given the same Expected and options makes the
	// same plan, with the same ID. Unless Groups forces G, such a plan
	// of two workers or more has at least two groups: with one, its
	// tasks could start only once every writer has committed, as after
	// the seal, and nothing would overlap the map stage.
	//
	// Group g is then the next Groups[g].Len() workers to commit after
	// those of groups 0..g-1: Stage.FormGroup fixes it (the engine naming
	// them, or the library listing the stage's worker manifests in the
	// order they were stored), committing a record of its workers and
	// their attempts under the plan with If-None-Match, so that every
	// process and every attempt of its tasks reads the same workers. A
	// task runs once its group has formed, reading its workers' manifests
	// and objects, with no stage manifest or index; RunTask forms its
	// group by listing when no process has. Seal needs the first level
	// sealed (Client.Seal with the N workers) and fails with
	// ErrGroupConflict, naming the worker, unless the groups hold exactly
	// its workers and attempts.
	Expected *Input
	// CommitsHanded, with Expected, says the engine hands every worker's
	// committed manifest to Stage.Committed (Writer.Commit's result)
	// before its group forms in this process: the plan's prediction then
	// counts no GET of a worker manifest and no LIST of the committed
	// workers (a group forms from the workers handed). A group formed
	// from workers not handed makes them anyway, beyond the prediction.
	CommitsHanded bool

	// diskPartBytes is PartBytes for an object on disk.
	diskPartBytes int64
	// floor: no TargetGetBytes was set and the plan has Scratch, so a
	// plan whose tasks would be on disk aims at the fewest under the cap.
	floor bool
	// expected: the stage is the sizes a request expects
	// (Options.Expected), not a stage that exists: its prediction's work
	// is bounded (maxPredictWork).
	expected bool
}

func (o Options) withDefaults(partitions int) Options {
	if o.TargetGetBytes <= 0 {
		o.TargetGetBytes = DefaultTargetGetBytes
		o.floor = o.Scratch != nil
	}
	if o.TaskCapBytes <= 0 {
		o.TaskCapBytes = DefaultTaskCapBytes
		if o.Scratch != nil {
			o.TaskCapBytes = DefaultDiskTaskCapBytes
		}
	}
	if o.Readers <= 0 {
		o.Readers = partitions
	}
	if o.ReaderRangeBytes <= 0 {
		o.ReaderRangeBytes = readerRangeBytes
	}
	if o.ReaderSpanBytes <= 0 {
		o.ReaderSpanBytes = readerSpanBytes
	}
	if o.ReaderReadAhead <= 0 {
		o.ReaderReadAhead = readerReadAhead
	}
	o.diskPartBytes = o.PartBytes
	if o.PartBytes <= 0 {
		o.PartBytes, o.diskPartBytes = DefaultPartBytes, DefaultDiskPartBytes
	}
	o.PartBytes = max(o.PartBytes, store.MinPartSize)
	o.diskPartBytes = max(o.diskPartBytes, store.MinPartSize)
	if o.Uploads <= 0 {
		o.Uploads = defaultUploads
	}
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = DefaultMemoryBytes
	}
	if o.GapBytes == 0 {
		o.GapBytes = defaultGapBytes
	}
	return o
}

// partBytes is the part size of a combined object of size bytes. A plan
// of at least Uploads tasks cuts its objects in parts of PartBytes: its
// tasks, run side by side, keep the connections busy, and every part is
// a PUT. A plan of fewer tasks (a small stage, often one task) cuts each
// object in about Uploads parts of equal size, none under S3's 5 MiB, so
// that its upload takes the time its GETs took rather than Uploads times
// longer; that costs at most Uploads x Uploads PUTs more per stage.
//
// An object laid out on disk (onDisk) takes parts of the disk part size,
// and is never one put, which would need it in memory: it takes at
// least two parts.
func (p *Plan) partBytes(size int64) int64 {
	o := p.opts
	pb, disk := o.PartBytes, p.onDisk(size)
	if disk {
		pb = o.diskPartBytes
	}
	if p.Tasks() < o.Uploads {
		pb = clamp64(ceilDiv64(size, int64(o.Uploads)), store.MinPartSize, pb)
	}
	if disk {
		pb = min(pb, ceilDiv64(size, 2))
	}
	return pb
}

// onDisk says whether a task of size bytes lays its object out in a
// Scratch file rather than in memory: it is over MemoryBytes, and large
// enough for two parts of S3's least size.
func (p *Plan) onDisk(size int64) bool {
	return p.opts.Scratch != nil && size > max(p.opts.MemoryBytes, 2*store.MinPartSize)
}

// Scratch makes files for tasks laid out on disk.
type Scratch interface {
	// Create makes a file of size bytes, counted against the disk's
	// limit, to be written in place; what names the task in errors.
	Create(size int64, what string) (ScratchFile, error)
}

// ScratchFile is one task's object on disk: written at any offset from
// many goroutines at once, read back in sections (a section's reads
// run while other offsets are still being written: the upload starts
// with the first part whose bytes are all there), and removed when the
// task ends.
type ScratchFile interface {
	io.WriterAt
	Section(off, n int64) (*io.SectionReader, error)
	Remove()
}

// Input is what a plan is made from: a sealed stage's partitions, the
// stored bytes of each (its index's summary) and its workers' data
// objects, in the stage manifest's order.
type Input struct {
	Query      string
	Stage      int
	Partitions int
	// PartitionBytes[p] is partition p's stored bytes.
	PartitionBytes []int64
	// Workers in the stage manifest's order, with their data objects'
	// sizes.
	Workers []WorkerInput
	// IndexKey is the level's index, which names the sealed level the
	// plan combines: plans of the same stage and sizes have the same ID.
	IndexKey string
}

// WorkerInput is one worker of the input level.
type WorkerInput struct {
	ID      string
	Objects []int64 // sizes of its data objects
}

// Range is [Lo, Hi): partitions of a bucket, or workers (indexes into
// the stage manifest's workers) of a group.
type Range struct{ Lo, Hi int }

// Len is Hi - Lo.
func (r Range) Len() int { return r.Hi - r.Lo }

// Requests are predicted requests: GETs, and PUT-class requests (PUT,
// POST, LIST: CreateMultipartUpload, UploadPart, CompleteMultipartUpload
// and ListObjects cost a PUT each).
type Requests struct {
	GET int64 `json:"get"`
	PUT int64 `json:"put"`
}

func (r Requests) add(o Requests) Requests { return Requests{r.GET + o.GET, r.PUT + o.PUT} }

// Prediction compares reading the stage as it is with combining it
// first and reading the combined level.
type Prediction struct {
	// Direct is what the readers make reading the stage as it is: per
	// reader a GET of the stage manifest and of its index entries, and
	// per writer object holding its partitions about one GET per
	// read_range_bytes of them.
	Direct Requests `json:"direct"`
	// Combine is what combining costs: the plan's GETs, the tasks' GETs
	// of their inputs (one per writer object and bucket) and PUTs of
	// their objects and manifests, and the seal's.
	Combine Requests `json:"combine"`
	// Combined is what the readers make reading the combined level: per
	// reader about one GET per task holding its partitions, G instead of
	// W.
	Combined Requests `json:"combined"`
	// Pays says whether Combine + Combined costs fewer dollars than
	// Direct.
	Pays bool `json:"pays"`
}

// Plan is J partition buckets by G writer groups, C = G x J tasks: task
// n combines group n % G's writer objects' frames of bucket n / G into
// one object. Tasks are numbered bucket by bucket so that the combined
// level's workers, in their order, hold the partitions in order.
type Plan struct {
	// ID names the plan: a hash of the input level's index key and the
	// buckets and groups. Task keys are under it, so attempts of one
	// task meet at one commit point and tasks of different plans never
	// mix.
	ID         string  `json:"id"`
	Query      string  `json:"query"`
	Stage      int     `json:"stage"`
	Partitions int     `json:"partitions"`
	Bytes      int64   `json:"bytes"`   // stored bytes of the stage
	Objects    int     `json:"objects"` // W: writer objects
	Readers    int     `json:"readers"` // R
	Buckets    []Range `json:"buckets"` // J contiguous partition ranges, balanced by bytes
	Groups     []Range `json:"groups"`  // G contiguous worker ranges, balanced by bytes
	// TaskBytes[n] is task n's expected input: its group's share of its
	// bucket's bytes (writers' bytes spread over partitions as the
	// stage's are).
	TaskBytes []int64 `json:"task_bytes"`
	// OverCap lists the tasks expected above TaskCapBytes even at the
	// largest G and J (single partitions too large for it).
	OverCap []int      `json:"over_cap,omitempty"`
	Predict Prediction `json:"predicted"`
	// Overlap: the plan was made while the stage is written
	// (Options.Expected), its groups formed in commit order.
	Overlap bool `json:"overlap,omitempty"`
	opts    Options
}

// Tasks is C = G x J.
func (p *Plan) Tasks() int { return len(p.Groups) * len(p.Buckets) }

// Task returns task n's group and bucket.
func (p *Plan) Task(n int) (g, j int) { return n % len(p.Groups), n / len(p.Groups) }

// taskID is task n's worker ID in the combined level: "c" and n, zero
// padded to the width of the last task's number, so that IDs compare in
// task order as strings.
func (p *Plan) taskID(n int) string {
	w := len(strconv.Itoa(p.Tasks() - 1))
	return fmt.Sprintf("c%0*d", w, n)
}

// MakePlan chooses buckets and groups for a stage and predicts the
// requests with and without combining. It is a pure function of its
// input and options.
//
// Sizing, for B stored bytes, W writer objects, R readers and GET size
// K: J = ceil(B / (W x K)) buckets make each writer object's bucket
// about K bytes (one GET of K per object and bucket, W x J GETs), and
// G = ceil(B / (R x K)) groups make each reader's range of a task about
// K bytes (R x G GETs). Both are then raised until each task's bytes are
// under the cap, in the proportion that keeps W x J + R x G least.
// J is at most the partitions and G at most the workers. Given Scratch
// and no K, a plan whose largest task would be laid out on disk starts
// from one bucket and one group instead: the fewest tasks under the
// disk cap, G x J balanced for the fewest GETs (the cost floor, 2 x
// sqrt(W x R x B / cap) of the tasks' and readers' GETs).
func MakePlan(in Input, o Options) (*Plan, error) {
	P := in.Partitions
	if P < 1 || len(in.PartitionBytes) != P {
		return nil, fmt.Errorf("combine plan of %s stage %d: %d partitions with %d partition sizes", in.Query, in.Stage, P, len(in.PartitionBytes))
	}
	if len(in.Workers) == 0 {
		return nil, fmt.Errorf("combine plan of %s stage %d: no workers", in.Query, in.Stage)
	}
	o = o.withDefaults(P)
	var B int64
	for p, b := range in.PartitionBytes {
		if b < 0 {
			return nil, fmt.Errorf("combine plan of %s stage %d: partition %d has %d bytes", in.Query, in.Stage, p, b)
		}
		B += b
	}
	wb, W := workerBytes(in)
	R := o.Readers
	if o.Buckets > P || o.Groups > len(in.Workers) || o.Buckets < 0 || o.Groups < 0 {
		return nil, fmt.Errorf("%w: %s stage %d: %d buckets and %d groups asked for; at most %d buckets (partitions) and %d groups (workers)",
			ErrInvalidPlan, in.Query, in.Stage, o.Buckets, o.Groups, P, len(in.Workers))
	}
	// A plan has at most maxPlanTasks tasks: refused before any work
	// when its bytes need more tasks of TaskCapBytes, or its asked sizes
	// make more.
	if need := B / o.TaskCapBytes; need > maxPlanTasks {
		return nil, fmt.Errorf("%w: %s stage %d: %d bytes need at least %d tasks of at most %d bytes (TaskCapBytes), more than the %d a plan may have",
			ErrInvalidPlan, in.Query, in.Stage, B, need, o.TaskCapBytes, maxPlanTasks)
	}
	if asked := int64(max(o.Buckets, 1)) * int64(max(o.Groups, 1)); asked > maxPlanTasks {
		return nil, fmt.Errorf("%w: %s stage %d: %d buckets x %d groups asked for, %d tasks, more than the %d a plan may have",
			ErrInvalidPlan, in.Query, in.Stage, o.Buckets, o.Groups, asked, maxPlanTasks)
	}
	J, G := o.Buckets, o.Groups
	if J == 0 {
		J = clamp(ceilDiv(B, int64(max(W, 1))*o.TargetGetBytes), 1, P)
	}
	if G == 0 {
		G = clamp(ceilDiv(B, int64(R)*o.TargetGetBytes), 1, len(in.Workers))
	}
	buckets, groups, worst := fitCap(in, wb, B, W, R, J, G, o)
	if o.floor && worst > o.MemoryBytes {
		// Tasks on disk: the fewest the cap allows, from one bucket and
		// one group (or those asked for) up.
		buckets, groups, _ = fitCap(in, wb, B, W, R, max(o.Buckets, 1), max(o.Groups, 1), o)
	}
	tasks := int64(len(buckets)) * int64(len(groups))
	if tasks > maxPlanTasks {
		return nil, fmt.Errorf("%w: %s stage %d: %d groups x %d buckets, %d tasks, more than the %d a plan may have",
			ErrInvalidPlan, in.Query, in.Stage, len(groups), len(buckets), tasks, maxPlanTasks)
	}
	// A stage that exists bounds its own prediction; an expected one
	// (Options.Expected: sizes a request names) is held to a stage of
	// the widest shapes measured.
	if work := int64(min(P, R)) * (int64(W) + tasks); o.expected && work > maxPredictWork {
		return nil, fmt.Errorf("%w: %s stage %d: an expected stage of %d readers x (%d writer objects + %d tasks) takes %d steps to predict, more than %d: expect fewer workers or partitions",
			ErrInvalidPlan, in.Query, in.Stage, min(P, R), W, tasks, work, int64(maxPredictWork))
	}
	p := &Plan{Query: in.Query, Stage: in.Stage, Partitions: P, Bytes: B, Objects: W, Readers: R, opts: o}
	p.Buckets, p.Groups = buckets, groups
	p.TaskBytes = make([]int64, p.Tasks())
	for n := range p.TaskBytes {
		g, j := p.Task(n)
		p.TaskBytes[n] = share(sum(wb, p.Groups[g]), B, sum(in.PartitionBytes, p.Buckets[j]))
		if p.TaskBytes[n] > o.TaskCapBytes {
			p.OverCap = append(p.OverCap, n)
		}
	}
	p.ID = planID(in.IndexKey, p.Buckets, p.Groups)
	p.Predict = predict(in, p, wb)
	return p, nil
}

// maxPlanTasks bounds a plan's tasks (G x J), and maxPredictWork the
// work of predicting an expected stage's readers' requests (readers x
// (writer objects + tasks)), so that no plan a request asks for holds
// more memory or CPU than a plan of a 10,000 x 10,000 stage (3.1 x 10^8
// steps, about 4 s).
const (
	maxPlanTasks   = 1 << 20
	maxPredictWork = 1 << 29
)

// fitCap raises J buckets and G groups until the largest task is under
// the cap, by the ratio by which it is over (buckets and groups are
// whole partitions and workers, so the largest task is above the
// average), and returns the buckets, the groups and the largest task's
// bytes. For a product G x J of T tasks, W x J + R x G is least at J =
// sqrt(T x R / W): the increase goes where it costs fewer GETs. J and
// G forced by o stay.
func fitCap(in Input, wb []int64, B int64, W, R, J, G int, o Options) (buckets, groups []Range, worst int64) {
	P := in.Partitions
	for {
		buckets, groups = balance(in.PartitionBytes, J), balance(wb, G)
		worst = share(maxSum(wb, groups), B, maxSum(in.PartitionBytes, buckets))
		if worst <= o.TaskCapBytes {
			return buckets, groups, worst
		}
		canJ, canG := o.Buckets == 0 && J < P, o.Groups == 0 && G < len(in.Workers)
		target := float64(G) * float64(J) * float64(worst) / float64(o.TaskCapBytes)
		nj, ng := J, G
		switch {
		case canJ && canG:
			nj = clamp(int(math.Ceil(math.Sqrt(target*float64(R)/float64(max(W, 1))))), J, P)
			ng = clamp(int(math.Ceil(target/float64(nj))), G, len(in.Workers))
			// G at its least already: J need only make up the rest.
			nj = clamp(int(math.Ceil(target/float64(ng))), J, nj)
		case canJ:
			nj = clamp(int(math.Ceil(target/float64(G))), J+1, P)
		case canG:
			ng = clamp(int(math.Ceil(target/float64(J))), G+1, len(in.Workers))
		default:
		}
		if nj == J && ng == G {
			switch {
			case canJ && (!canG || W <= R):
				nj++
			case canG:
				ng++
			}
		}
		if nj == J && ng == G {
			return buckets, groups, worst // single partitions of single workers over the cap
		}
		J, G = nj, ng
	}
}

// workerBytes is each worker's bytes, and the count of writer objects.
func workerBytes(in Input) (wb []int64, objects int) {
	wb = make([]int64, len(in.Workers))
	for i, w := range in.Workers {
		for _, s := range w.Objects {
			wb[i] += s
			objects++
		}
	}
	return wb, objects
}

// predict estimates requests, spreading each writer object's bytes over
// partitions as the stage's bytes are spread (a shuffle's writers hash
// rows over every partition).
// readerGets is the GETs of a reader of range r (rb bytes) from sources
// (writer objects, or combined objects) holding es of its bytes, as the
// reader plans them: one per source per group of neighbouring partitions
// it reads together (of up to three quarters of read_ahead x
// read_range_bytes, a partition at least), each cut in read_range_bytes.
// A partition alone in its group whose GETs are fewer than read_ahead is
// cut into up to read_ahead GETs of at least 1 MiB, at even offsets and
// at its sources' ends. With read_span_bytes above read_range_bytes a
// source's consecutive ranges share GETs of up to read_span_bytes: its
// bytes for a reader lie together in it, across the groups while the
// reader has at most read_ahead sources (it keeps that many spans
// open), else within each group.
func readerGets(o Options, es []int64, rb int64, r Range) int64 {
	groupBudget := max(1, int64(o.ReaderReadAhead)*o.ReaderRangeBytes*3/4)
	groups := clamp64(ceilDiv64(rb, groupBudget), 1, int64(r.Len()))
	if o.ReaderSpanBytes > o.ReaderRangeBytes {
		var gets, sources int64
		for _, e := range es {
			if e > 0 {
				sources++
			}
		}
		if sources <= int64(o.ReaderReadAhead) {
			groups = 1
		}
		for _, e := range es {
			if e > 0 {
				gets += groups * max(1, ceilDiv64(e, groups*o.ReaderSpanBytes))
			}
		}
		return gets
	}
	var spans int64
	for _, e := range es {
		if e > 0 {
			spans += groups * max(1, ceilDiv64(e, groups*o.ReaderRangeBytes))
		}
	}
	if groups < int64(r.Len()) || spans >= groups*int64(o.ReaderReadAhead) {
		return spans
	}
	// Each partition alone, of per bytes: n GETs at multiples of per / n,
	// and a new one at each source's end that falls between them.
	per := rb / groups
	n := min(int64(o.ReaderReadAhead), per/min(readerMinSpan, o.ReaderRangeBytes))
	if n*groups <= spans {
		return spans
	}
	var at, between int64
	for _, e := range es {
		if e > 0 {
			at += e / groups
			if at < per && at*n%per != 0 {
				between++
			}
		}
	}
	return groups * (n + between)
}

func predict(in Input, p *Plan, wb []int64) Prediction {
	o := p.opts
	P, B, R := p.Partitions, p.Bytes, p.Readers
	prefix := make([]int64, P+1)
	for i, b := range in.PartitionBytes {
		prefix[i+1] = prefix[i] + b
	}
	bytesOf := func(r Range) int64 { return prefix[r.Hi] - prefix[r.Lo] }
	readers := balanceCount(P, R)
	var pr Prediction
	var direct, combined []int64
	for _, r := range readers {
		rb := bytesOf(r)
		direct, combined = direct[:0], combined[:0]
		for _, w := range in.Workers {
			for _, s := range w.Objects {
				direct = append(direct, share(s, B, rb))
			}
		}
		for n := range p.Tasks() {
			g, j := p.Task(n)
			b := p.Buckets[j]
			lo, hi := max(b.Lo, r.Lo), min(b.Hi, r.Hi)
			if lo >= hi {
				continue
			}
			combined = append(combined, share(sum(wb, p.Groups[g]), B, bytesOf(Range{lo, hi})))
		}
		pr.Direct.GET += 2 + readerGets(o, direct, rb, r) // 2: stage manifest, index entries
		pr.Combined.GET += 2 + readerGets(o, combined, rb, r)
	}
	// Open: the combined level's manifest (absent), the stage manifest,
	// the index summary. Per task: its manifest (absent), the bucket's
	// index entries.
	open, perTask := int64(3), int64(2)
	if p.Overlap {
		// Made while the stage is written, run in one process (RunAll):
		// no stage manifest or index to open; per group its record
		// (absent), a LIST of the formed groups' records, a LIST of the
		// committed workers and their manifests (neither when commits
		// are handed over), and the record's put; per task its manifest
		// (absent). The seal reads the first level's
		// stage manifest and every group's record.
		open, perTask = 1, 1
		for _, g := range p.Groups {
			pr.Combine.GET++
			pr.Combine.PUT += 2
			if !o.CommitsHanded {
				pr.Combine.GET += int64(g.Len())
				pr.Combine.PUT++
			}
		}
		pr.Combine.GET += 1 + int64(len(p.Groups))
	}
	pr.Combine.GET += open
	for n := range p.Tasks() {
		g, j := p.Task(n)
		pr.Combine.GET += perTask
		bb := bytesOf(p.Buckets[j])
		for _, w := range in.Workers[p.Groups[g].Lo:p.Groups[g].Hi] {
			for _, s := range w.Objects {
				if share(s, B, bb) > 0 {
					pr.Combine.GET++ // one run per object (spill on)
				}
			}
		}
		pr.Combine.PUT += p.taskWrites(s3Prices, p.TaskBytes[n])
		pr.Combine.PUT++ // the task manifest
	}
	// Seal: the combined manifest (absent), a LIST of the task manifests,
	// a head and the entries of each, then the index and the combined
	// manifest, a LIST that finds the task manifests still there, and
	// the stage manifest.
	nonEmpty := int64(0)
	for _, b := range p.TaskBytes {
		if b > 0 {
			nonEmpty++
		}
	}
	pr.Combine.GET += 1 + int64(p.Tasks()) + nonEmpty
	pr.Combine.PUT += 2 + 3
	pr.Pays = s3Prices.Dollars(pr.Combine.add(pr.Combined)) < s3Prices.Dollars(pr.Direct)
	return pr
}

// balance cuts sizes into n contiguous ranges of about equal sums:
// cut k falls where the running sum is nearest k/n of the total (every
// range holds at least one element).
func balance(sizes []int64, n int) []Range {
	n = clamp(n, 1, len(sizes))
	prefix := make([]int64, len(sizes)+1)
	for i, s := range sizes {
		prefix[i+1] = prefix[i] + s
	}
	total := float64(prefix[len(sizes)])
	out := make([]Range, 0, n)
	lo := 0
	for k := 1; k < n; k++ {
		target := total * float64(k) / float64(n)
		last := len(sizes) - (n - k) // leave one element per range after this one
		c := lo + 1
		for c < last && float64(prefix[c+1]) <= target {
			c++
		}
		if c < last && target-float64(prefix[c]) > float64(prefix[c+1])-target {
			c++
		}
		out = append(out, Range{lo, c})
		lo = c
	}
	return append(out, Range{lo, len(sizes)})
}

// balanceCount cuts n items into k contiguous ranges of equal count
// (the first n % k one longer).
func balanceCount(n, k int) []Range {
	k = clamp(k, 1, n)
	out := make([]Range, k)
	lo := 0
	for i := range out {
		hi := lo + n/k
		if i < n%k {
			hi++
		}
		out[i] = Range{lo, hi}
		lo = hi
	}
	return out
}

func planID(indexKey string, buckets, groups []Range) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", indexKey)
	for _, rs := range [][]Range{buckets, groups} {
		for _, r := range rs {
			fmt.Fprintf(h, "%d,%d;", r.Lo, r.Hi)
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// maxSum is the largest sum of s over the ranges.
func maxSum(s []int64, rs []Range) int64 {
	var m int64
	for _, r := range rs {
		m = max(m, sum(s, r))
	}
	return m
}

func sum(s []int64, r Range) int64 {
	var t int64
	for _, v := range s[r.Lo:r.Hi] {
		t += v
	}
	return t
}

// share is a x b / total without overflow for stage-sized numbers.
func share(a, total, b int64) int64 {
	if total <= 0 {
		return 0
	}
	return int64(float64(a) * float64(b) / float64(total))
}

func ceilDiv(a, b int64) int { return int(ceilDiv64(a, b)) }

func ceilDiv64(a, b int64) int64 {
	if b <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

func clamp64(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }
