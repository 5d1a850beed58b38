package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/internal/keys"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// kmsProxy stands between the clients and local-kms: it counts the calls
// by operation (X-Amz-Target), and while fail is set answers each with
// it (a status and an error type) instead.
type kmsProxy struct {
	url   string
	mu    sync.Mutex
	calls map[string]int
	fail  atomic.Pointer[kmsFault]
}

type kmsFault struct {
	status int
	typ    string
}

func newKMSProxy(t *testing.T, endpoint string) *kmsProxy {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &kmsProxy{calls: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "TrentService.")
		p.mu.Lock()
		p.calls[op]++
		p.mu.Unlock()
		if f := p.fail.Load(); f != nil {
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			w.WriteHeader(f.status)
			w.Write([]byte(`{"__type":"` + f.typ + `","message":"injected by the test"}`))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// take returns the calls so far by operation and starts counting anew.
func (p *kmsProxy) take() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls
	p.calls = map[string]int{}
	return c
}

// kmsClient opens a client, as one process would, whose stage keys come
// from KMS key arn through the proxy.
func kmsClient(t *testing.T, st store.Store, prefix, kmsURL, arn string) *durashuffle.Client {
	cfg := encConfig(t, "off")
	cfg.Store.Prefix = prefix
	cfg.Store.EncryptionKMSKeyID, cfg.Store.EncryptionKMSEndpoint = arn, kmsURL
	cfg.Store.Region = testenv.LocalKMSRegion
	return testenv.Client(t, cfg, durashuffle.WithStore(st),
		durashuffle.WithCredentials(credentials.NewStaticCredentialsProvider("test", "test", "")))
}

// TestKMSKeyOncePerProcess: 8 writers and then 8 readers of a query in
// one process cost one GenerateDataKey and nothing more; 8 readers in
// another process one Decrypt; two processes racing to write a new
// query agree on one key (the loser unwraps the winner's), and its
// stage, sealed from both, reads back.
func TestKMSKeyOncePerProcess(t *testing.T) {
	endpoint, arn := testenv.LocalKMS(t)
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			e := b.Start(t)
			st, _ := e.NewStore(t)
			proxy := newKMSProxy(t, endpoint)
			const workers, partitions, n = 8, 4, 2048
			writer := kmsClient(t, st, "kms", proxy.url, arn)
			defer writer.Close()
			var wg sync.WaitGroup
			errs := make([]error, workers)
			for w := range workers {
				wg.Go(func() {
					ww, err := writer.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: string(rune('0' + w)), Attempt: "a", Partitions: partitions})
					if err == nil {
						rec := batch(w*n/workers, n/workers)
						err = ww.Write(w%partitions, rec)
						rec.Release()
					}
					if err == nil {
						_, err = ww.Commit(ctx)
					}
					errs[w] = err
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if _, err := writer.Seal(ctx, "q", 0, workers); err != nil {
				t.Fatal(err)
			}
			readers := func(c *durashuffle.Client) {
				var wg sync.WaitGroup
				for r := range 8 {
					wg.Go(func() { errs[r] = readErr(c, "q") })
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
			}
			readers(writer)
			if calls := proxy.take(); calls["GenerateDataKey"] != 1 || len(calls) != 1 {
				t.Fatalf("8 writers and 8 readers in one process made KMS calls %v, want one GenerateDataKey", calls)
			}
			reader := kmsClient(t, st, "kms", proxy.url, arn)
			defer reader.Close()
			readers(reader)
			if calls := proxy.take(); calls["Decrypt"] != 1 || len(calls) != 1 {
				t.Fatalf("8 readers in another process made KMS calls %v, want one Decrypt", calls)
			}
			m, err := manifest.LoadStageManifest(ctx, st, writer.Layout(), "q", 0)
			if err != nil || m.Encrypted() == nil || m.Encrypted().Source != "kms" || m.Encrypted().KMSKeyID != arn {
				t.Fatalf("stage manifest encryption %+v (%v), want kms with key %s", m.Encrypted(), err, arn)
			}

			// Two processes, one new query: each asks for a key, one
			// stores its own first, and the other unwraps that one.
			a, b := kmsClient(t, st, "kms", proxy.url, arn), kmsClient(t, st, "kms", proxy.url, arn)
			defer a.Close()
			defer b.Close()
			for i, c := range []*durashuffle.Client{a, b} {
				wg.Go(func() {
					ww, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "race", Worker: string(rune('0' + i)), Attempt: "a", Partitions: partitions})
					if err == nil {
						err = writeRows(ww, 600, partitions)
					}
					if err == nil {
						_, err = ww.Commit(ctx)
					}
					errs[i] = err
				})
			}
			wg.Wait()
			if err := errors.Join(errs[0], errs[1]); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Seal(ctx, "race", 0, 2); err != nil {
				t.Fatalf("seal two writers that raced for the query's key: %v", err)
			}
			if err := readErr(b, "race"); err != nil {
				t.Fatal(err)
			}
			calls := proxy.take()
			t.Logf("racing writers: KMS calls %v", calls)
			if calls["GenerateDataKey"] < 1 || calls["GenerateDataKey"]+calls["Decrypt"] > 3 {
				t.Fatalf("two racing processes made KMS calls %v", calls)
			}
		})
	}
}

// TestKMSFaultsCommitNothing: a KMS that throttles every call, or that
// is down, fails the writer before it writes anything, naming the query
// and the KMS call; nothing is stored. A reader of a stage whose key
// cannot be unwrapped fails naming it too.
func TestKMSFaultsCommitNothing(t *testing.T) {
	endpoint, arn := testenv.LocalKMS(t)
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			e := b.Start(t)
			st, _ := e.NewStore(t)
			proxy := newKMSProxy(t, endpoint)
			down := httptest.NewServer(http.NotFoundHandler())
			downURL := down.URL
			down.Close() // nothing listens there any more
			for _, tc := range []struct {
				name, url string
				fault     *kmsFault
				want      string
			}{
				{"throttled", proxy.url, &kmsFault{400, "ThrottlingException"}, "KMS GenerateDataKey"},
				{"internal-error", proxy.url, &kmsFault{500, "KMSInternalException"}, "KMS GenerateDataKey"},
				{"down", downURL, nil, "KMS GenerateDataKey"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					proxy.fail.Store(tc.fault)
					defer proxy.fail.Store(nil)
					c := kmsClient(t, st, tc.name, tc.url, arn)
					defer c.Close()
					_, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "0", Partitions: 2})
					if !errors.Is(err, durashuffle.ErrKey) || !strings.Contains(err.Error(), "q stage 0") || !strings.Contains(err.Error(), tc.want) {
						t.Fatalf("writer with KMS %s: %v, want ErrKey naming q stage 0 and %s", tc.name, err, tc.want)
					}
					objs, _, err := st.List(ctx, c.Layout().Root(), "")
					if err != nil || len(objs) != 0 {
						t.Fatalf("KMS %s: %d objects stored (%v): %v", tc.name, len(objs), err, objs)
					}
				})
			}
			// A stage written while KMS answered, read by a process
			// while it throttles.
			c := kmsClient(t, st, "read-throttled", proxy.url, arn)
			defer c.Close()
			writeWorkers(t, c, "q", 0, 1, 300, 2, nil)
			proxy.fail.Store(&kmsFault{400, "ThrottlingException"})
			defer proxy.fail.Store(nil)
			r := kmsClient(t, st, "read-throttled", proxy.url, arn)
			defer r.Close()
			_, err := r.OpenStage(ctx, "q", 0)
			if !errors.Is(err, durashuffle.ErrKey) || !strings.Contains(err.Error(), "KMS Decrypt") || !strings.Contains(err.Error(), "q stage 0") {
				t.Fatalf("reader with KMS throttling: %v, want ErrKey naming the stage and KMS Decrypt", err)
			}
		})
	}
}

// TestKMSKeyLivesWithItsQuery: a query's wrapped key ({query}/key.json)
// outlives every gc run while a stage of the query remains (gc takes
// the expired results stage and leaves the key, and the intermediate
// stage reads back in a new process), and goes with the query at
// delete-query, which leaves nothing of the query in the bucket.
func TestKMSKeyLivesWithItsQuery(t *testing.T) {
	endpoint, arn := testenv.LocalKMS(t)
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			e := b.Start(t)
			st, _ := e.NewStore(t)
			c := kmsClient(t, st, "lives", endpoint, arn)
			defer c.Close()
			writeWorkers(t, c, "q", 0, 1, 600, 2, nil)
			writeOne(t, c, durashuffle.WriterOptions{Query: "q", Stage: 1, Worker: "0", Partitions: 2, Results: true})
			for stage := range 2 {
				if _, err := c.Seal(ctx, "q", stage, 1); err != nil {
					t.Fatal(err)
				}
			}
			keyJSON := c.Layout().QueryPrefix("q") + keys.KeyName
			stored := func() error {
				rc, err := st.GetRange(ctx, keyJSON, 0, -1)
				if err == nil {
					rc.Close()
				}
				return err
			}
			if err := stored(); err != nil {
				t.Fatalf("the query's wrapped key %s: %v", keyJSON, err)
			}

			r, err := gc.Run(ctx, st, c.Layout(), gc.Options{Now: func() time.Time { return time.Now().Add(time.Hour) }})
			if err != nil {
				t.Fatal(err)
			}
			if r.Totals.StagesDeleted != 1 {
				t.Fatalf("gc deleted %d stages, want the results stage", r.Totals.StagesDeleted)
			}
			if err := stored(); err != nil {
				t.Fatalf("after gc took the results stage, the query's wrapped key is gone: %v", err)
			}
			fresh := kmsClient(t, st, "lives", endpoint, arn)
			defer fresh.Close()
			if err := readErr(fresh, "q"); err != nil {
				t.Fatalf("stage 0 after gc, read by a new process: %v", err)
			}

			if _, err := gc.DeleteQuery(ctx, st, c.Layout(), "q"); err != nil {
				t.Fatal(err)
			}
			if err := stored(); !store.IsNotFound(err) {
				t.Fatalf("after delete-query, the query's wrapped key: %v, want not found", err)
			}
			objs, _, err := st.List(ctx, c.Layout().Root(), "")
			if err != nil || len(objs) != 0 {
				t.Fatalf("after delete-query, %d objects left (%v): %v", len(objs), err, objs)
			}
		})
	}
}
