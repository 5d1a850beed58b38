package uploader

import (
	"context"
	"slices"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// abortAgain makes sure an aborted upload stays gone when parts of it
// were cut off in flight: a server may still be writing such a part when
// the abort arrives and bring the upload back once it is done (S3 says
// an abort may have to be repeated; versitygw does it). Over a store
// that lists uploads, it looks a few times, briefly apart, and aborts
// again while the upload is listed. Best effort, as the abort succeeded:
// a listing or a repeated abort that fails is left to gc and the
// bucket's lifecycle rule.
func abortAgain(ctx context.Context, st store.Writer, key, uploadID string) {
	l, ok := store.As[store.Lister](st)
	if !ok {
		return
	}
	for i := range 4 {
		t := time.NewTimer(time.Duration(50<<i) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		ups, err := l.ListUploads(ctx, key)
		if err != nil || !slices.ContainsFunc(ups, func(x store.UploadInfo) bool { return x.Key == key && x.UploadID == uploadID }) {
			return
		}
		if err := st.AbortMultipart(ctx, key, uploadID); err != nil && !store.IsNotFound(err) {
			return
		}
	}
}
