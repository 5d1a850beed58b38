package sidecar_test

import (
	"context"
	"fmt"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/manifest"
)

// bucketKeys is what the bucket holds under the layout's root, by query: the
// keys of its objects and of its open multipart uploads.
type bucketKeys struct {
	objects map[string][]string
	uploads map[string][]string
}

// storedByQuery lists every object and open multipart upload under the
// layout's root, in two requests, and sorts them by the query their key
// names (Layout.Parse; a key of no query, such as a commit guard probe,
// is filed under "").
func (e *env) storedByQuery(ctx context.Context) (bucketKeys, error) {
	l := e.client.Layout()
	s := bucketKeys{objects: map[string][]string{}, uploads: map[string][]string{}}
	objs, _, err := e.raw.List(ctx, l.Root(), "")
	if err != nil {
		return s, fmt.Errorf("list %q: %w", l.Root(), err)
	}
	for _, o := range objs {
		k, _ := l.Parse(o.Key)
		s.objects[k.Query] = append(s.objects[k.Query], o.Key)
	}
	ups, err := e.raw.ListUploads(ctx, l.Root())
	if err != nil {
		return s, fmt.Errorf("list uploads under %q: %w", l.Root(), err)
	}
	for _, u := range ups {
		k, _ := l.Parse(u.Key)
		s.uploads[k.Query] = append(s.uploads[k.Query], u.Key)
	}
	return s, nil
}

// nothingLeftOf is nothingLeft for many queries in one listing: no
// object of any of them (manifests included), and no multipart upload
// open anywhere under the root. Like nothingLeft it polls up to 10 s for
// the server to finish aborting.
func (e *env) nothingLeftOf(ctx context.Context, queries []string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := e.storedByQuery(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		var left []string
		for _, q := range queries {
			if objs := s.objects[q]; len(objs) > 0 {
				left = append(left, fmt.Sprintf("%s: %d objects %v", q, len(objs), objs))
			}
		}
		for q, ups := range s.uploads {
			left = append(left, fmt.Sprintf("%s: %d open uploads %v", q, len(ups), ups))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("after 10 s still %d left: %v", len(left), left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stageManifests lists what a seal writes under the stage prefix of
// query: its stage manifest and index objects (Layout.Parse kinds
// KeyStageManifest and KeyIndex).
func (e *env) stageManifests(ctx context.Context, query string, stage int) ([]string, error) {
	l := e.client.Layout()
	objs, _, err := e.raw.List(ctx, l.StagePrefix(query, stage), "/")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.StagePrefix(query, stage), err)
	}
	var out []string
	for _, o := range objs {
		if k, ok := l.Parse(o.Key); ok && (k.Kind == manifest.KeyStageManifest || k.Kind == manifest.KeyIndex) {
			out = append(out, o.Key)
		}
	}
	return out, nil
}

// uploading turns the spill off: each run is uploaded as it flushes, for
// tests of what happens to parts in flight while a stream still sends
// (with spill on, nothing is uploaded before the commit message).
func uploading(c *durashuffle.Config) { c.Write.Spill = "off" }
