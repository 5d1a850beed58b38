package bench

import (
	"context"
	"fmt"
	"io"
	"path"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/store"
)

// probeLink measures what the link carries on this machine right now:
// conns connections each PUTting (then GETting) two part-sized bodies through the link, with nothing else to do: no
// encoding, no multipart bookkeeping. It is the practical ceiling that
// every contender shares, next to the nominal limit. It returns the PUT
// and GET rates in bytes per second.
func (e *Env) probeLink(ctx context.Context, conns int, part int64) (put, get float64, err error) {
	if e.Link == nil || e.Link.Addr == "" {
		return 0, 0, nil
	}
	tc, err := clientTLS(e.o.Config.Store.CAFile, e.o.Config.Store.InsecureSkipVerify)
	if err != nil {
		return 0, 0, err
	}
	hc, tr := HTTPClient(e.Link.Addr, conns, tc)
	defer tr.CloseIdleConnections()
	st, err := openKind(ctx, e.o.Config, e.Endpoint, e.Bucket, e.Embedded, hc, &store.Counter{})
	if err != nil {
		return 0, 0, err
	}
	body := make([]byte, part)
	const each = 2
	q := e.query("probe")
	key := func(c, i int) string { return path.Join(e.o.Config.Store.Prefix, q, fmt.Sprintf("p-%d-%d", c, i)) }
	defer e.cleanup(ctx, q)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for c := range conns {
		g.Go(func() error {
			for i := range each {
				if err := st.Put(gctx, key(c, i), body, store.PutOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, fmt.Errorf("link probe PUT: %w", err)
	}
	put = float64(int64(conns)*each*part) / time.Since(start).Seconds()
	start = time.Now()
	g, gctx = errgroup.WithContext(ctx)
	for c := range conns {
		g.Go(func() error {
			for i := range each {
				rc, err := st.GetRange(gctx, key(c, i), 0, -1)
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, fmt.Errorf("link probe GET: %w", err)
	}
	get = float64(int64(conns)*each*part) / time.Since(start).Seconds()
	return put, get, nil
}
