package uploader

// Keeper is a byte budget that takes an object's uploaded chunk buffers
// instead of the pool reusing them (the sidecar's memory store). Safe for
// concurrent use.
type Keeper interface {
	// Reserve takes n bytes of the budget, or returns false.
	Reserve(n int64) bool
	// Unreserve gives back n reserved bytes; declined says they did not
	// fit.
	Unreserve(n int64, declined bool)
}

// keeping is what an object keeps for its Keeper (under Upload.mu): each
// chunk once uploaded, no copy (a last chunk shorter than half a buffer
// is copied to its size, so the budget counts what it holds). When a
// chunk does not fit, the object stops keeping and gives back everything
// it kept.
type keeping struct {
	k      Keeper // nil: not keeping (none given, or a chunk did not fit)
	chunks map[int32][]byte
	bytes  int64 // reserved from k for chunks
}

// keepIn makes the object keep its chunks in k. Call before the first
// chunk is handed over.
func (o *Upload) keepIn(k Keeper) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.keep.k = k
}

// keepChunk takes chunk c's buffer once every part carrying its bytes is
// uploaded. It reports whether the object took the buffer itself (false:
// the pool reuses it).
func (o *Upload) keepChunk(c *chunk) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	kp := &o.keep
	if kp.k == nil || o.err != nil {
		return false
	}
	buf, took := c.buf, true
	if len(buf) < cap(buf)/2 {
		buf, took = append([]byte(nil), buf...), false
	}
	n := int64(cap(buf))
	if !kp.k.Reserve(n) {
		kp.k.Unreserve(kp.bytes, true)
		*kp = keeping{}
		return false
	}
	if kp.chunks == nil {
		kp.chunks = map[int32][]byte{}
	}
	kp.chunks[c.n] = buf
	kp.bytes += n
	return took
}

// Keeping reports whether every chunk of the object uploaded so far is
// kept (false when its Sink has no Keeper, once a chunk did not fit, or
// once the object failed). Safe for concurrent use; a writer asks it
// after Finish, to tell whether the whole object will be kept.
func (o *Upload) Keeping() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.keep.k != nil && o.err == nil
}

// TakeKept hands over the kept chunks in stream order after a successful
// Finish (every chunk but the last one full, whatever parts carried
// them), with the bytes reserved for them, which the caller now owns (to
// admit or unreserve). ok is false, and nothing is reserved any more,
// unless every chunk was kept and the object is complete. Safe for
// concurrent use; only the first call can hand anything over (a second
// one returns ok false and nothing).
func (o *Upload) TakeKept() (chunks [][]byte, reserved int64, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	kp := o.keep
	o.keep.chunks, o.keep.bytes = nil, 0
	n := int(o.chunks)
	if kp.k == nil || o.err != nil || o.state != stateCompleted || len(kp.chunks) != n {
		if kp.k != nil {
			kp.k.Unreserve(kp.bytes, false)
		}
		return nil, 0, false
	}
	chunks = make([][]byte, n)
	for i := range chunks {
		c, has := kp.chunks[int32(i+1)]
		if !has {
			kp.k.Unreserve(kp.bytes, false)
			return nil, 0, false
		}
		chunks[i] = c
	}
	return chunks, kp.bytes, true
}

// dropKept gives back every kept chunk.
func (o *Upload) dropKept() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keep.k != nil && o.keep.bytes > 0 {
		o.keep.k.Unreserve(o.keep.bytes, false)
	}
	o.keep.chunks, o.keep.bytes = nil, 0
}
