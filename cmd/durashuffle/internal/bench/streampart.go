package bench

import (
	"context"
	"fmt"
	"io"

	"github.com/durashuffle/durashuffle/store"
)

// streamPart is UploadPartStream of a wrapper that sees streamed parts as
// it sees UploadPart (the progress meter, the data clock): it calls
// before, the PartStreamer below st, then after with that call's error.
// The wrapper must be a PartStreamer itself, so that store.As finds it
// rather than the store below.
func streamPart(ctx context.Context, st store.Store, key, id string, n int32, size int64, body func() io.Reader, before func(), after func(error)) (string, uint32, error) {
	ps, ok := store.As[store.PartStreamer](st)
	if !ok {
		return "", 0, fmt.Errorf("upload part %d of %s: the store does not stream parts", n, key)
	}
	before()
	etag, crc, err := ps.UploadPartStream(ctx, key, id, n, size, body)
	after(err)
	return etag, crc, err
}
