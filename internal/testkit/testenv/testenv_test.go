package testenv_test

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// S3's rules: 3-63 characters of lowercase letters, digits and hyphens,
// starting and ending with a letter or digit.
var validBucket = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)

func TestEndpoints(t *testing.T) {
	for _, be := range testenv.Backends() {
		t.Run(be.Name, func(t *testing.T) {
			a, b := be.Start(t), be.Start(t)
			if a.Bucket == b.Bucket {
				t.Errorf("two calls share bucket %q", a.Bucket)
			}
			for _, e := range []testenv.Endpoint{a, b} {
				if !validBucket.MatchString(e.Bucket) || strings.Contains(e.Bucket, "--") {
					t.Errorf("bucket name %q is not valid for S3", e.Bucket)
				}
			}
			// The buckets exist and are separate: what one holds, the
			// other does not.
			sa, ca := a.NewStore(t)
			sb, _ := b.NewStore(t)
			ctx := context.Background()
			if err := sa.Put(ctx, "k", []byte("in a"), store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			rc, err := sa.GetRange(ctx, "k", 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(got, []byte("in a")) {
				t.Errorf("read back %q", got)
			}
			if _, err := sb.GetRange(ctx, "k", 0, -1); !store.IsNotFound(err) {
				t.Errorf("key of bucket a visible in bucket b: %v", err)
			}
			if got := ca.Requests(); got["PutObject"] != 1 || got["GetObject"] != 1 {
				t.Errorf("counter of a's store = %v, want one PutObject and one GetObject", got)
			}
		})
	}
}

func TestLongTestNameMakesValidBucket(t *testing.T) {
	t.Run(strings.Repeat("Very_Long Sub-Test Name ", 10)+"--END--", func(t *testing.T) {
		e := testenv.Embedded(t)
		if !validBucket.MatchString(e.Bucket) || strings.Contains(e.Bucket, "--") {
			t.Errorf("bucket name %q is not valid for S3", e.Bucket)
		}
	})
}
