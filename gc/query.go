package gc

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// queryObjects lists a query's objects: under its prefix, and under
// every shard prefix ({root}~{shard}/) its spread data objects, whatever
// key_spread the writers had.
func queryObjects(ctx context.Context, st store.Lister, l manifest.Layout, query string) ([]store.ObjectInfo, error) {
	prefix := l.QueryPrefix(query)
	objs, _, err := st.List(ctx, prefix, "")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	_, dirs, err := st.List(ctx, l.SpreadPrefix(), "/")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.SpreadPrefix(), err)
	}
	for _, dir := range dirs {
		shard, ok := l.ShardQueryPrefix(dir, query)
		if !ok {
			continue
		}
		more, _, err := st.List(ctx, shard, "")
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", shard, err)
		}
		objs = append(objs, more...)
	}
	return objs, nil
}

// DeleteQuery deletes every object of a query and aborts its uploads: the
// stage manifests first, then the worker manifests (so readers stop
// finding the stages before any data goes), then everything else under
// the query's prefix (and its spread data objects), then the open multipart uploads there. Idempotent.
// Writers of the query still running fail or leave objects that a later
// DeleteQuery or Run removes.
func DeleteQuery(ctx context.Context, st store.Store, l manifest.Layout, query string) (Report, error) {
	if err := manifest.ValidateID("query", query); err != nil {
		return Report{}, err
	}
	r := Report{Prefix: l.Root(), Query: query, Now: time.Now(), Uploads: []Upload{}, Orphans: []Object{}, Stages: []Stage{}}
	prefix := l.QueryPrefix(query)
	objs, err := queryObjects(ctx, st, l, query)
	if err != nil {
		return r, fmt.Errorf("delete-query %s: %w", query, err)
	}
	var order [3][]string // stage manifests, worker manifests, the rest
	stages := map[int]*Stage{}
	for _, obj := range objs {
		if k := parseKey(l, obj.Key); !strings.HasPrefix(obj.Key, prefix) && (k.Kind != manifest.KeyData || k.Query != query) {
			continue
		}
		r.Scanned.Objects++
		r.Scanned.Bytes += obj.Size
		k := parseKey(l, obj.Key)
		var s *Stage
		if k.Kind != manifest.KeyForeign {
			if s = stages[k.Stage]; s == nil {
				s = &Stage{Query: query, Stage: k.Stage}
				stages[k.Stage] = s
			}
			s.Bytes += obj.Size
		} else {
			r.Scanned.Foreign++
		}
		switch k.Kind {
		case manifest.KeyStageManifest:
			order[0] = append(order[0], obj.Key)
			s.Sealed = true
			s.Manifests++
		case manifest.KeyWorkerManifest:
			order[1] = append(order[1], obj.Key)
			s.Manifests++
		case manifest.KeyData:
			order[2] = append(order[2], obj.Key)
			s.Objects++
		case manifest.KeyIndex:
			// After the stage manifest that names it.
			order[2] = append(order[2], obj.Key)
			s.Manifests++
		default:
			// Under the query's own prefix everything is the query's.
			order[2] = append(order[2], obj.Key)
		}
		if s != nil && obj.LastModified.After(s.CommittedAt) && k.Kind != manifest.KeyData {
			s.CommittedAt = obj.LastModified
		}
	}
	for i, keys := range order {
		if err := deleteKeys(ctx, st, keys); err != nil {
			return r, fmt.Errorf("delete-query %s: delete %d %s: %w", query, len(keys), [...]string{"stage manifests", "worker manifests", "data objects"}[i], err)
		}
		r.Totals.ObjectsDeleted += len(keys)
	}
	r.Totals.BytesDeleted = r.Scanned.Bytes
	r.Scanned.Stages = len(stages)
	for _, s := range stages {
		r.Stages = append(r.Stages, *s)
	}
	slices.SortFunc(r.Stages, func(a, b Stage) int { return cmp.Compare(a.Stage, b.Stage) })
	r.Totals.StagesDeleted = len(r.Stages)

	ups, err := st.ListUploads(ctx, prefix)
	if err != nil {
		return r, fmt.Errorf("delete-query %s: list uploads under %s: %w", query, prefix, err)
	}
	spread, err := st.ListUploads(ctx, l.SpreadPrefix())
	if err != nil {
		return r, fmt.Errorf("delete-query %s: list uploads under %s: %w", query, l.SpreadPrefix(), err)
	}
	ups = append(ups, spread...)
	for _, u := range ups {
		if k := parseKey(l, u.Key); !strings.HasPrefix(u.Key, prefix) && (k.Kind != manifest.KeyData || k.Query != query) {
			continue
		}
		r.Scanned.Uploads++
		if err := st.AbortMultipart(ctx, u.Key, u.UploadID); err != nil && !store.IsNotFound(err) {
			return r, fmt.Errorf("delete-query %s: abort upload %s of %s: %w", query, u.UploadID, u.Key, err)
		}
		r.Uploads = append(r.Uploads, Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated})
		r.Totals.UploadsAborted++
	}
	return r, nil
}
