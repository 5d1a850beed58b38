package combine

import (
	"math"
	"testing"
)

// TestUploadWrites: a multipart upload's write-class requests by store,
// at the part counts where GCS's compose tree grows a level.
func TestUploadWrites(t *testing.T) {
	for _, c := range []struct {
		store string
		parts int64
		want  int64
	}{
		{"s3", 1, 3}, {"s3", 9, 11},
		{"azure", 1, 2}, {"azure", 9, 10},
		{"gcs", 1, 2}, {"gcs", 32, 33}, {"gcs", 33, 36}, {"gcs", 1024, 1024 + 32 + 1}, {"gcs", 1025, 1025 + 33 + 2 + 1},
	} {
		p, err := PricesOf(c.store)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.UploadWrites(c.parts); got != c.want {
			t.Errorf("%s, %d parts: %d write-class requests, want %d", c.store, c.parts, got, c.want)
		}
	}
	if _, err := PricesOf("b2"); err == nil {
		t.Error("PricesOf(b2) found prices")
	}
}

// TestClassify: requests counted by operation fall into the store's
// classes; deletes and aborts are in neither.
func TestClassify(t *testing.T) {
	p, err := PricesOf("gcs")
	if err != nil {
		t.Fatal(err)
	}
	r, other := p.Classify(map[string]int64{"objects.insert": 5, "objects.compose": 1, "objects.list": 2, "objects.get": 7, "objects.delete": 4})
	if r.PUT != 8 || r.GET != 7 || other != 4 {
		t.Fatalf("classified %+v and %d other; want 8 write, 7 read, 4 other", r, other)
	}
	if d := p.Dollars(r); math.Abs(d-(8*0.005+7*0.0004)/1000) > 1e-15 {
		t.Fatalf("$%v", d)
	}
}
