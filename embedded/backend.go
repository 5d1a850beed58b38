package embedded

import (
	"bytes"
	"io"
	"slices"
	"strings"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3afero"
)

// backend adjusts gofakes3's filesystem backend where it falls short of
// S3 (see the package doc); everything else passes through.
type backend struct {
	*s3afero.MultiBucketBackend
}

// PutObject reads the whole body before handing it on, so the object file
// is written only once the body is complete and its checksum verified.
func (b *backend) PutObject(bucket, key string, meta map[string]string, input io.Reader, size int64,
	conditions *gofakes3.PutConditions,
) (gofakes3.PutObjectResult, error) {
	if _, ok := input.(*bytes.Reader); !ok {
		// Multipart completion already passes memory; request bodies
		// arrive as streams.
		body, err := io.ReadAll(input)
		if err != nil {
			// Returned as is: gofakes3 renders its own error codes
			// (BadDigest from the checksum check) only when unwrapped.
			return gofakes3.PutObjectResult{}, err
		}
		if int64(len(body)) != size {
			return gofakes3.PutObjectResult{}, gofakes3.ErrIncompleteBody
		}
		input = bytes.NewReader(body)
	}
	return b.MultiBucketBackend.PutObject(bucket, key, meta, input, size, conditions)
}

// ListBucket lists with S3's semantics, computed from the backend's flat
// (prefix-only) listing: keys in byte order, and a common prefix for each
// distinct key[:len(prefix)+i+len(delimiter)] where the delimiter first
// occurs at i after the prefix.
func (b *backend) ListBucket(bucket string, prefix *gofakes3.Prefix, _ gofakes3.ListBucketPage) (*gofakes3.ObjectList, error) {
	var p gofakes3.Prefix
	if prefix != nil {
		p = *prefix
	}
	flat := gofakes3.Prefix{HasPrefix: p.HasPrefix, Prefix: p.Prefix}
	all, err := b.MultiBucketBackend.ListBucket(bucket, &flat, gofakes3.ListBucketPage{})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all.Contents, func(x, y *gofakes3.Content) int { return strings.Compare(x.Key, y.Key) })

	out := gofakes3.NewObjectList()
	for _, c := range all.Contents {
		if !strings.HasPrefix(c.Key, p.Prefix) {
			continue
		}
		if p.HasDelimiter {
			rest := c.Key[len(p.Prefix):]
			if i := strings.Index(rest, p.Delimiter); i >= 0 {
				out.AddPrefix(c.Key[:len(p.Prefix)+i+len(p.Delimiter)])
				continue
			}
		}
		out.Add(c)
	}
	return out, nil
}
