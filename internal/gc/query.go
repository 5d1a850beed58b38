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
// every shard prefix ({root}~{shard}/) its spread data and combined
// objects, whatever key_spread the writers and combine tasks had.
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
// the query's prefix (and its spread data and combined objects), then the
// open multipart uploads there. A combined level's manifest goes before
// the stage manifest. Idempotent.
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
	// Combined levels' manifests, stage manifests, worker manifests, the
	// rest: a combined level's manifest goes before the stage manifest,
	// so that no combined seal finishing meanwhile writes it again.
	var order [4][]string
	stages := map[int]*Stage{}
	for _, obj := range objs {
		if !ofQuery(l, query, obj.Key) {
			continue
		}
		r.Scanned.Objects++
		r.Scanned.Bytes += obj.Size
		k := parseKey(l, obj.Key)
		combined, plan := false, ""
		if ck, ok := parseCombinedManifest(l, obj.Key); ok {
			k, combined = ck, true
		} else if ck, p, _, ok := parseCombineKey(l, obj.Key); ok {
			k, plan = ck, p
		}
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
		switch {
		case combined:
			order[0] = append(order[0], obj.Key)
			s.Manifests++
		case plan != "":
			// A combine plan's keys: its objects are data; its task
			// manifests and index go after the stage manifest that names
			// them, with the data.
			order[3] = append(order[3], obj.Key)
			if strings.HasSuffix(obj.Key, ".arrows") {
				s.Objects++
			} else {
				s.Manifests++
			}
		case k.Kind == manifest.KeyStageManifest:
			order[1] = append(order[1], obj.Key)
			s.Sealed = true
			s.Manifests++
		case k.Kind == manifest.KeyWorkerManifest:
			order[2] = append(order[2], obj.Key)
			s.Manifests++
		case k.Kind == manifest.KeyData:
			order[3] = append(order[3], obj.Key)
			s.Objects++
		case k.Kind == manifest.KeyIndex:
			// After the stage manifest that names it.
			order[3] = append(order[3], obj.Key)
			s.Manifests++
		default:
			// Under the query's own prefix everything is the query's.
			order[3] = append(order[3], obj.Key)
		}
		if s != nil && obj.LastModified.After(s.CommittedAt) && k.Kind != manifest.KeyData && !strings.HasSuffix(obj.Key, ".arrows") {
			s.CommittedAt = obj.LastModified
		}
	}
	for i, keys := range order {
		if err := deleteKeys(ctx, st, keys); err != nil {
			return r, fmt.Errorf("delete-query %s: delete %d %s: %w", query, len(keys), [...]string{"combined levels' manifests", "stage manifests", "worker manifests", "data objects"}[i], err)
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
		if !ofQuery(l, query, u.Key) {
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

// ofQuery says whether key is the query's: under its prefix, or a data
// or combined object of it spread under a shard prefix.
func ofQuery(l manifest.Layout, query, key string) bool {
	if strings.HasPrefix(key, l.QueryPrefix(query)) {
		return true
	}
	if k := parseKey(l, key); k.Kind == manifest.KeyData {
		return k.Query == query
	}
	k, _, _, ok := parseCombineKey(l, key)
	return ok && k.Query == query
}
