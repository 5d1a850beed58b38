package reader

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestOpenRefusesVersion1: a stage written by a version 1 writer, sealed
// (one JSON stage manifest with every frame) or not (JSON worker
// manifests), is refused by Open with ErrVersion naming both versions.
func TestOpenRefusesVersion1(t *testing.T) {
	ctx := context.Background()
	v1Worker := `{"format_version":"1.0","kind":"worker","query":"q1","stage":3,"worker":"0","attempt":"a","schema":"","compression":"lz4","partitions":2,"chunk_size":8388608,` +
		`"objects":[{"key":"worker-0/attempt-a/data-0.arrows","size":100,"parts":1,"crc32c":1}],` +
		`"frames":[{"partition":1,"object":0,"offset":0,"length":100,"rows":5,"bytes":400,"crc32c":2}],"totals":{"rows":5,"frames":1}}`
	for name, keys := range map[string]map[string]string{
		"sealed":   {testLayout.StageManifestKey(testQuery, testStage): `{"format_version":"1.0","kind":"stage","query":"q1","stage":3,"partitions":2,"workers":[` + v1Worker + `]}`},
		"unsealed": {testLayout.WorkerManifestKey(testQuery, testStage, "0"): v1Worker},
	} {
		t.Run(name, func(t *testing.T) {
			st := &store.Mem{}
			for k, v := range keys {
				st.Set(k, []byte(v))
			}
			_, err := Open(ctx, st, testLayout, testQuery, testStage, Options{})
			if !errors.Is(err, manifest.ErrVersion) || !strings.Contains(err.Error(), `format_version "1.0"`) || !strings.Contains(err.Error(), "understands 3.x") {
				t.Fatalf("Open: %v, want ErrVersion naming 1.0 and 3.x", err)
			}
		})
	}
}
