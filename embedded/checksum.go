package embedded

import (
	"encoding/base64"
	"encoding/binary"
	"hash"
	"hash/crc32"
	"io"
	"net/http"
	"strings"

	"github.com/johannesboyne/gofakes3"

	"github.com/durashuffle/durashuffle/store"
)

// checkBodies wraps request bodies of PUTs (PutObject, UploadPart) so that
// reading them fails the way S3 would fail the request. The failure is a
// gofakes3 error returned from Read, which gofakes3 passes up unchanged
// and renders as the S3 error response: no protocol is written here.
func checkBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Body != nil {
			r.Body = checkedBody(r)
		}
		next.ServeHTTP(w, r)
	})
}

func checkedBody(r *http.Request) io.ReadCloser {
	sha := r.Header.Get("X-Amz-Content-Sha256")
	chunked := strings.HasPrefix(sha, "STREAMING-") || strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked")
	_, isPart := r.URL.Query()["uploadId"]
	if chunked {
		// gofakes3 decodes only signed chunks without trailer, and only
		// for PutObject; anything else would be stored still encoded.
		if isPart || sha != "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" {
			return failBody{r.Body, gofakes3.ErrorMessage(gofakes3.ErrNotImplemented,
				"aws-chunked body ("+sha+") not supported by the embedded server; send x-amz-checksum-* as a header")}
		}
		// The checksum covers the decoded body, which gofakes3 decodes
		// after us: not verified.
		return r.Body
	}
	v := r.Header.Get("X-Amz-Checksum-Crc32c")
	if v == "" {
		return r.Body
	}
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(raw) != 4 {
		return failBody{r.Body, gofakes3.ErrorMessage(gofakes3.ErrInvalidArgument,
			"Value for x-amz-checksum-crc32c header is invalid.")}
	}
	return &crcBody{rc: r.Body, want: binary.BigEndian.Uint32(raw), h: crc32.New(store.CRC32CTable)}
}

// crcBody fails the final read if the body's CRC32C differs from the one
// the client declared.
type crcBody struct {
	rc   io.ReadCloser
	want uint32
	h    hash.Hash32
}

func (c *crcBody) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	c.h.Write(p[:n])
	if err == io.EOF && c.h.Sum32() != c.want {
		return n, gofakes3.ErrorMessage(gofakes3.ErrBadDigest,
			"The CRC32C you specified did not match the calculated checksum.")
	}
	return n, err
}

func (c *crcBody) Close() error { return c.rc.Close() }

// failBody refuses to be read.
type failBody struct {
	rc  io.ReadCloser
	err error
}

func (f failBody) Read([]byte) (int, error) { return 0, f.err }
func (f failBody) Close() error             { return f.rc.Close() }
