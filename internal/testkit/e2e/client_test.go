package e2e_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestWithRegisterer: the client's metrics land on the caller's registry
// with the values of what the client did, and a second client on the same
// registry is refused by name.
func TestWithRegisterer(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	st := &store.Mem{}
	cfg := testConfig()
	cfg.Sidecar.MemoryStoreBytes = 64 * durashuffle.MiB // the fast path's metrics too
	c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithRegisterer(reg))
	defer c.Close()
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "0", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeRows(w, 12_000, 4); err != nil {
		t.Fatal(err)
	}
	m, err := w.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Read every partition back: from the memory store, which holds the
	// worker (it fits in 64 MiB).
	stage, err := c.Seal(ctx, "q", 0, 1)
	if err != nil || stage.Totals.Rows != m.Totals.Rows {
		t.Fatalf("seal: %v, %v", stage, err)
	}
	s, err := c.OpenStage(ctx, "q", 0)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := s.ReadPartitions(ctx, []int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	for rr.Next() {
	}
	rr.Release()
	if rr.Err() != nil {
		t.Fatal(rr.Err())
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		got[f.GetName()] = f
	}
	value := func(name string, labels ...string) float64 {
		t.Helper()
		f := got[name]
		if f == nil {
			t.Fatalf("%s is not registered", name)
		}
	metrics:
		for _, mt := range f.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, lp := range mt.Label {
					ok = ok || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
				}
				if !ok {
					continue metrics
				}
			}
			switch {
			case mt.Counter != nil:
				return mt.Counter.GetValue()
			case mt.Gauge != nil:
				return mt.Gauge.GetValue()
			case mt.Histogram != nil:
				return float64(mt.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("%s has no series %v", name, labels)
		return 0
	}
	if v := value("durashuffle_upload_bytes_total"); int64(v) != m.Totals.BytesStored {
		t.Errorf("durashuffle_upload_bytes_total = %v, the manifest stored %d bytes", v, m.Totals.BytesStored)
	}
	if v := value("durashuffle_upload_part_seconds"); int(v) != m.Totals.Parts {
		t.Errorf("durashuffle_upload_part_seconds counts %v parts, the manifest has %d", v, m.Totals.Parts)
	}
	if v := value("durashuffle_upload_concurrency"); int(v) != cfg.Write.UploadConcurrency {
		t.Errorf("durashuffle_upload_concurrency = %v, want %d", v, cfg.Write.UploadConcurrency)
	}
	if v := value("durashuffle_commit_guard", "state", string(durashuffle.GuardEnforced)); v != 1 {
		t.Errorf("durashuffle_commit_guard{state=enforced} = %v after a commit, want 1", v)
	}
	if got, want := value("durashuffle_retries_total", "op", "UploadPart", "reason", "SlowDown"), 0.0; got != want {
		t.Errorf("retries of UploadPart for SlowDown = %v, want %v (known labels start at 0)", got, want)
	}
	if v := value("durashuffle_memstore_admitted_bytes_total"); v <= 0 {
		t.Errorf("durashuffle_memstore_admitted_bytes_total = %v: the committed worker was not counted in", v)
	}
	if v := value("durashuffle_served_bytes_total", "source", "memory"); int64(v) != m.Totals.BytesStored {
		t.Errorf("durashuffle_served_bytes_total{source=memory} = %v, the worker stored %d bytes", v, m.Totals.BytesStored)
	}
	if v := value("durashuffle_served_bytes_total", "source", "s3"); v != 0 {
		t.Errorf("durashuffle_served_bytes_total{source=s3} = %v, want 0: every frame was held", v)
	}
	if _, ok := got["go_goroutines"]; ok {
		t.Error("the client registered the Go runtime's collector: that is the program's to register")
	}

	_, err = durashuffle.Open(ctx, cfg, durashuffle.WithStore(st), durashuffle.WithRegisterer(reg))
	if err == nil || !strings.Contains(err.Error(), "register the client's metrics") {
		t.Fatalf("a second client on the same registry: %v, want a registration error", err)
	}
}

// countingTransport counts the requests sent through it.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// TestOpenWithAWSOptions: on a real MinIO, a client built from an
// aws.Config of the caller's (its credentials, no environment) and an
// HTTP client of the caller's sends every request through that client,
// and writes, commits and reads back.
func TestOpenWithAWSOptions(t *testing.T) {
	t.Run("minio", func(t *testing.T) {
		ep := testenv.MinIO(t)
		id, secret := ep.AccessKeyID, ep.SecretAccessKey
		if id == "" { // from the environment: take them, then hide them
			id, secret = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		}
		// Only the aws.Config below may supply credentials.
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		t.Setenv("AWS_PROFILE", "durashuffle-test-none")
		ctx := context.Background()
		cfg := testConfig()
		cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle = ep.Bucket, ep.URL, true
		// The caller's client is the caller's to configure: here, to
		// trust the test MinIO's certificate authority.
		base := http.DefaultTransport.(*http.Transport).Clone()
		if ep.CAFile != "" {
			pem, err := os.ReadFile(ep.CAFile)
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(pem) {
				t.Fatalf("no certificate in %s", ep.CAFile)
			}
			base.TLSClientConfig = &tls.Config{RootCAs: roots}
		}
		tr := &countingTransport{next: base}
		awsCfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider(id, secret, "")}
		c, err := durashuffle.Open(ctx, cfg, durashuffle.WithAWSConfig(awsCfg), durashuffle.WithHTTPClient(&http.Client{Transport: tr}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		m, rows := writeReadBack(t, c, "aws", 3000, 2)
		if rows != m.Totals.Rows || rows != 3000 {
			t.Fatalf("read %d rows, committed %d, wrote 3000", rows, m.Totals.Rows)
		}
		var sent int64
		for _, n := range c.Counter().Requests() {
			sent += n
		}
		if got := tr.n.Load(); got == 0 || got != sent {
			t.Fatalf("the caller's HTTP client carried %d requests, the client counted %d sent", got, sent)
		}
	})
}
