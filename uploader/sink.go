package uploader

import (
	"context"
	"math"
	"sync"

	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/store"
)

// Sink hands one writer's output to the pool: it gives out the writer's
// objects (chunker.Objects), numbered 0, 1, ..., and keeps their
// uploads for the writer to finish or abort (Take). Create and Limit are
// for the writer's appending goroutine; Take is safe from any goroutine.
type Sink struct {
	pool *Pool
	ctx  context.Context
	opt  SinkOptions

	mu      sync.Mutex
	objects []*Upload
}

// SinkOptions say what a Sink needs of its writer.
type SinkOptions struct {
	// Key names data object obj (0-based); called once per object, when
	// its upload starts.
	Key func(obj int) string
	// OnFail, if set, hears the first permanent failure of each object
	// at once (so the writer can stop), from the goroutine that met it.
	OnFail func(error)
	// Keeper, if set, keeps each object's chunks once uploaded (see
	// Upload.Keeping and Upload.TakeKept).
	Keeper Keeper
	// MaxObjectSize bounds an object's bytes (Limit); 0: only the
	// store's parts bound it.
	MaxObjectSize int64
}

// The pool's Sink is the objects a chunker writes.
var _ chunker.Objects = (*Sink)(nil)

// NewSink starts the sink of one writer; ctx governs its uploads (a
// writer cancels it to cut them off).
func (p *Pool) NewSink(ctx context.Context, opt SinkOptions) *Sink {
	return &Sink{pool: p, ctx: ctx, opt: opt}
}

// Create starts the writer's next object (see chunker.Objects): size is
// about its bytes (0: unknown), onDisk says they come as file sections,
// release lets go of the files once the upload is over.
func (s *Sink) Create(size int64, onDisk bool, release func()) (chunker.Object, error) {
	s.mu.Lock()
	n := len(s.objects)
	s.mu.Unlock()
	return s.newObject(s.object(n), size, onDisk, release)
}

// Limit is the most bytes an object may hold (see chunker.Objects):
// written from memory, Config.ChunkSize x store.MaxParts; from disk,
// what Config.MaxPartSize allows (PlanFileParts refuses more), or 0 when
// the objects take no sections (a Keeper keeps their chunks in memory).
// Both are bounded by SinkOptions.MaxObjectSize.
func (s *Sink) Limit(onDisk bool) int64 {
	limit := s.pool.cfg.ChunkSize * store.MaxParts
	if onDisk {
		if s.opt.Keeper != nil {
			return 0
		}
		limit = math.MaxInt64
	}
	if s.opt.MaxObjectSize > 0 && s.opt.MaxObjectSize < limit {
		limit = s.opt.MaxObjectSize
	}
	return limit
}

// Take returns the uploads started so far, in object order, and forgets
// them: the caller owns them now (Finish each, or Abort each). Call it
// once the appending goroutine is done with the sink.
func (s *Sink) Take() []*Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	objs := s.objects
	s.objects = nil
	return objs
}

// object returns the upload of data object obj, starting it (and any
// before it) on first use.
func (s *Sink) object(obj int) *Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.objects) <= obj {
		o := s.pool.newUpload(s.ctx, s.opt.Key(len(s.objects)), s.opt.OnFail)
		if s.opt.Keeper != nil {
			o.keepIn(s.opt.Keeper)
		}
		s.objects = append(s.objects, o)
	}
	return s.objects[obj]
}
