package store

// Unwrapper is a Store that wraps another to add a concern (retries,
// metrics, a progress meter), as restic's backends do. Unwrap returns the
// store it wraps, so that As finds an optional capability (PartStreamer)
// through it without the wrapper forwarding each one.
type Unwrapper interface {
	Unwrap() Store
}

// As returns the first store in st's chain (st, then what each
// Unwrapper wraps) that implements T. A wrapper that must see the calls
// of a capability (the retry layer retries streamed parts) implements T
// itself and is found first; one that need not stays out of its way.
// The chain ends at a store that is not an Unwrapper. st is any of the
// store's interfaces (a Writer, a Reader, a Store).
func As[T any](st any) (T, bool) {
	for st != nil {
		if t, ok := st.(T); ok {
			return t, true
		}
		u, ok := st.(Unwrapper)
		if !ok {
			break
		}
		st = u.Unwrap()
	}
	var zero T
	return zero, false
}

// StreamsParts reports whether st, or a store it wraps, streams parts
// (PartStreamer) on this endpoint.
func StreamsParts(st any) bool {
	ps, ok := As[PartStreamer](st)
	return ok && ps.StreamsParts()
}
