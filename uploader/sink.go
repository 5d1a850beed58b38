package uploader

import (
	"context"
	"sync"
)

// Sink hands one writer's output to the pool: the chunks of its data
// objects, numbered 0, 1, ..., each object's upload started the first
// time a chunk of it (or Prepare) names it. Its methods Acquire,
// Release, Streaming, Begin, Grow, Prepare and Emit are the chunker's
// sink (chunker.Sink and chunker.StreamSink) and are for one goroutine,
// the chunker's appending one, which owns the chunk being filled; Take
// is safe from any goroutine.
type Sink struct {
	pool *Pool
	ctx  context.Context
	opt  SinkOptions

	// filling is the chunk begun last, until it is emitted or released.
	filling *filling

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
}

// NewSink starts the sink of one writer; ctx governs its uploads (a
// writer cancels it to cut them off).
func (p *Pool) NewSink(ctx context.Context, opt SinkOptions) *Sink {
	return &Sink{pool: p, ctx: ctx, opt: opt}
}

// Acquire returns an empty buffer with capacity Config.ChunkSize,
// blocking while Config.MaxBuffered buffers are held in the pool (by
// every writer). It fails only when ctx is done.
func (s *Sink) Acquire(ctx context.Context) ([]byte, error) { return s.pool.acquire(ctx) }

// Release returns a buffer that will not be emitted; the chunk begun last
// is the pool's already, and is abandoned instead: its part fails, and
// with it its object.
func (s *Sink) Release(buf []byte) {
	if f := s.filling; f != nil {
		s.filling = nil
		f.abandon()
		return
	}
	s.pool.release(buf)
}

// Streaming reports whether parts upload while their chunks fill (the
// store streams parts, over https, and the pool sends checksums): then
// every chunk is announced with Begin and each append to it with Grow.
func (s *Sink) Streaming() bool { return s.pool.streams }

// Begin says buf (from Acquire, empty) starts filling as chunk part
// (1-based) of object obj; its upload may start before it is full, and
// ownership of buf passes to the pool. The caller appends to buf (never
// past its capacity), reports each length with Grow, and ends the chunk
// with Emit, or Release if it gives up. It fails with the object's
// failure, or when the object takes no more chunks.
func (s *Sink) Begin(obj int, part int32, buf []byte) error {
	f, err := s.object(obj).begin(part, buf)
	if err != nil {
		return err
	}
	s.filling = f
	return nil
}

// Grow says the chunk begun last now holds n bytes.
func (s *Sink) Grow(n int) { s.filling.grow(n) }

// Prepare says object obj will take more than one small put: its
// multipart upload is created now, in the background, so that its first
// chunk starts uploading at its first byte (see Config.streamAfter). A
// prepared object that ends as one chunk is a one-part multipart upload.
// Idempotent; no-op unless Streaming.
func (s *Sink) Prepare(obj int) { s.object(obj).prepare() }

// Emit hands over chunk part (1-based, ascending) of object obj: the
// chunk begun last, now complete at its last Grow (buf is its buffer),
// or else buf, whose ownership passes to the pool. last marks the
// object's final chunk: part 1 that is also last is one PutObject unless
// Prepare was called. It does not block; it fails with the object's
// failure, or when the object takes no more chunks (after its last).
func (s *Sink) Emit(obj int, part int32, buf []byte, last bool) error {
	if f := s.filling; f != nil {
		s.filling = nil
		f.finish(last)
		return nil
	}
	return s.object(obj).submit(part, buf, last)
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
