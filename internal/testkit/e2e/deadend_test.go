package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestWriteToDeadEndpoint: a library writer on an endpoint that drops
// packets, or accepts and never answers, fails Write or Commit within a
// bound set by the timeouts (not request_timeout's minutes per attempt),
// with an error naming the endpoint and the key, and commits nothing.
func TestWriteToDeadEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, addr, want string
	}{
		{"drops packets", testenv.BlackHole(t), "no TCP connection within connect_timeout 200ms"},
		{"never answers", testenv.NewStall(t).Addr, "no response within first_byte_timeout 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := durashuffle.DefaultConfig()
			cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle, cfg.Store.Region = "b", "http://"+tc.addr, true, "us-east-1"
			cfg.Store.ConnectTimeout, cfg.Store.FirstByteTimeout = durashuffle.Duration(200*time.Millisecond), durashuffle.Duration(time.Second)
			cfg.Store.RetryMaxAttempts, cfg.Store.RetryBaseDelay, cfg.Store.RetryMaxDelay = 3, durashuffle.Duration(10*time.Millisecond), durashuffle.Duration(20*time.Millisecond)
			cfg.Write.CleanupTimeout = durashuffle.Duration(time.Second)
			c, err := durashuffle.Open(t.Context(), cfg, durashuffle.WithCredentials(credentials.NewStaticCredentialsProvider("x", "y", "")))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			schema := arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}}, nil)
			start := time.Now()
			w, err := c.NewWriter(t.Context(), durashuffle.WriterOptions{Query: "q", Worker: "0", Partitions: 1, Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
			b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
			rec := b.NewRecordBatch()
			b.Release()
			err = w.Write(0, rec)
			rec.Release()
			if err == nil {
				_, err = w.Commit(t.Context())
			} else {
				w.Abort()
			}
			took := time.Since(start)
			if err == nil {
				t.Fatal("a write to a dead endpoint committed")
			}
			for _, want := range []string{"gave up after 3 attempts", "endpoint " + tc.addr + ": " + tc.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
			// The commit guard's probe, the object's put and the manifest's
			// are 3 attempts each; the cleanup 1s a step.
			if took > time.Minute {
				t.Errorf("the write took %v to fail", took)
			}
		})
	}
}
