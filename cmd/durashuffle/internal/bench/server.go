package bench

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// MemServer is the benchmark's default endpoint: an in-process server
// speaking the subset of S3 that durashuffle and the SDK's transfer
// manager use (objects, conditional puts, multipart uploads, ranged GETs,
// listing, batch delete), keeping objects in memory as the parts they
// were uploaded in. It verifies x-amz-checksum-crc32c like S3 but
// computes no MD5 and copies no part, so on a 2-core machine it is never
// what limits a contender: the embedded gofakes3 server reads every part
// with a growing io.ReadAll and hashes it with MD5 under a global lock,
// and cannot carry the default link's 64 MiB/s while a writer encodes on
// the same cores (see BENCHMARKS.md). Signatures are not checked.
type MemServer struct {
	srv      *http.Server
	endpoint string
	mu       sync.Mutex
	buckets  map[string]map[string]*memObject
	uploads  map[string]*memUpload
	ids      atomic.Int64
}

type memObject struct {
	parts    [][]byte
	size     int64
	etag     string
	modified time.Time
}

type memUpload struct {
	bucket, key string
	started     time.Time
	parts       map[int][]byte
}

// StartMemServer serves on a free loopback port with the given buckets.
func StartMemServer(buckets ...string) (*MemServer, error) {
	return StartMemServerTLS(nil, buckets...)
}

// StartMemServerTLS is StartMemServer serving HTTPS with cfg's
// certificate when cfg is not nil (the endpoint is then https://).
func StartMemServerTLS(cfg *tls.Config, buckets ...string) (*MemServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if cfg != nil {
		ln = tls.NewListener(ln, cfg.Clone())
		scheme = "https"
	}
	s := &MemServer{buckets: map[string]map[string]*memObject{}, uploads: map[string]*memUpload{}}
	for _, b := range buckets {
		s.buckets[b] = map[string]*memObject{}
	}
	s.endpoint = scheme + "://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// Endpoint is the server's base URL (path-style addressing).
func (s *MemServer) Endpoint() string { return s.endpoint }

// Close stops the server and drops every object.
func (s *MemServer) Close() error {
	err := s.srv.Close()
	s.mu.Lock()
	s.buckets, s.uploads = nil, nil
	s.mu.Unlock()
	return err
}

type s3Error struct {
	XMLName xml.Name `xml:"Error"`
	Code    string   `xml:"Code"`
	Message string   `xml:"Message"`
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	xml.NewEncoder(w).Encode(s3Error{Code: code, Message: msg})
}

func writeXML(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/xml")
	w.Write([]byte(xml.Header))
	xml.NewEncoder(w).Encode(v)
}

// readBody reads exactly Content-Length bytes into one buffer and checks
// the CRC32C the client declared, if any: in a header, or in the trailer
// of an aws-chunked body (what the AWS SDK sends over TLS, CRC32C or
// CRC32).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") {
		return readChunked(w, r)
	}
	if r.ContentLength < 0 {
		writeErr(w, http.StatusLengthRequired, "MissingContentLength", "Content-Length is required")
		return nil, false
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		writeErr(w, http.StatusBadRequest, "IncompleteBody", err.Error())
		return nil, false
	}
	if v := r.Header.Get("X-Amz-Checksum-Crc32c"); v != "" && !checksumOK(body, "x-amz-checksum-crc32c", v) {
		writeErr(w, http.StatusBadRequest, "BadDigest", "The CRC32C you specified did not match the calculated checksum.")
		return nil, false
	}
	return body, true
}

// readChunked decodes an unsigned aws-chunked body (STREAMING-UNSIGNED-
// PAYLOAD-TRAILER): hex-size CRLF data CRLF chunks, a zero chunk, then
// trailer lines, and checks the checksum trailer against the data.
func readChunked(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	n, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
	if err != nil || n < 0 {
		writeErr(w, http.StatusLengthRequired, "MissingContentLength", "aws-chunked needs X-Amz-Decoded-Content-Length")
		return nil, false
	}
	bad := func(msg string) ([]byte, bool) {
		writeErr(w, http.StatusBadRequest, "IncompleteBody", msg)
		return nil, false
	}
	br := bufio.NewReaderSize(r.Body, 64<<10)
	body := make([]byte, 0, n)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return bad("aws-chunked: " + err.Error())
		}
		size, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(line, ";", 2)[0]), 16, 64)
		if err != nil || size < 0 || int64(len(body))+size > n {
			return bad("aws-chunked: bad chunk size " + strings.TrimSpace(line))
		}
		if size == 0 {
			break
		}
		start := len(body)
		body = body[:start+int(size)]
		if _, err := io.ReadFull(br, body[start:]); err != nil {
			return bad("aws-chunked: " + err.Error())
		}
		if crlf, err := br.ReadString('\n'); err != nil || strings.TrimSpace(crlf) != "" {
			return bad("aws-chunked: no CRLF after a chunk")
		}
	}
	if int64(len(body)) != n {
		return bad(fmt.Sprintf("aws-chunked: %d bytes, decoded length %d", len(body), n))
	}
	declared := strings.ToLower(r.Header.Get("X-Amz-Trailer"))
	checked := declared == ""
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimSpace(line)
		if line == "" {
			break
		}
		k, v, _ := strings.Cut(line, ":")
		if strings.ToLower(k) == declared {
			if !checksumOK(body, declared, strings.TrimSpace(v)) {
				writeErr(w, http.StatusBadRequest, "BadDigest", "The "+declared+" trailer did not match the calculated checksum.")
				return nil, false
			}
			checked = true
		}
		if err != nil {
			break
		}
	}
	if !checked {
		return bad("aws-chunked: no " + declared + " trailer")
	}
	return body, true
}

var ieeeTable = crc32.MakeTable(crc32.IEEE)

// checksumOK checks a base64 CRC32C or CRC32 value (by header name)
// against body; other algorithms are accepted unchecked.
func checksumOK(body []byte, name, v string) bool {
	var table *crc32.Table
	switch name {
	case "x-amz-checksum-crc32c":
		table = store.CRC32CTable
	case "x-amz-checksum-crc32":
		table = ieeeTable
	default:
		return true
	}
	raw, err := base64.StdEncoding.DecodeString(v)
	return err == nil && len(raw) == 4 && binary.BigEndian.Uint32(raw) == crc32.Checksum(body, table)
}

func (s *MemServer) etag() string { return fmt.Sprintf(`"%032x"`, s.ids.Add(1)) }

func (s *MemServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	bucket, key, _ := strings.Cut(path, "/")
	q := r.URL.Query()
	s.mu.Lock()
	objs, ok := s.buckets[bucket]
	if !ok && !(r.Method == http.MethodPut && key == "") {
		s.mu.Unlock()
		writeErr(w, http.StatusNotFound, "NoSuchBucket", bucket)
		return
	}
	s.mu.Unlock()
	switch {
	case key == "":
		s.serveBucket(w, r, bucket, objs, q)
	case r.Method == http.MethodPost && q.Has("uploads"):
		id := strconv.FormatInt(s.ids.Add(1), 10)
		s.mu.Lock()
		s.uploads[id] = &memUpload{bucket: bucket, key: key, parts: map[int][]byte{}, started: time.Now().UTC()}
		s.mu.Unlock()
		writeXML(w, struct {
			XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
			Bucket   string   `xml:"Bucket"`
			Key      string   `xml:"Key"`
			UploadID string   `xml:"UploadId"`
		}{Bucket: bucket, Key: key, UploadID: id})
	case r.Method == http.MethodPut && q.Has("uploadId"):
		n, err := strconv.Atoi(q.Get("partNumber"))
		if err != nil || n < 1 || n > store.MaxParts {
			writeErr(w, http.StatusBadRequest, "InvalidArgument", "partNumber")
			return
		}
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		s.mu.Lock()
		u := s.uploads[q.Get("uploadId")]
		if u != nil {
			u.parts[n] = body
		}
		s.mu.Unlock()
		if u == nil {
			writeErr(w, http.StatusNotFound, "NoSuchUpload", q.Get("uploadId"))
			return
		}
		w.Header().Set("ETag", s.etag())
	case r.Method == http.MethodPost && q.Has("uploadId"):
		s.complete(w, r, bucket, key, q.Get("uploadId"))
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		s.mu.Lock()
		_, ok := s.uploads[q.Get("uploadId")]
		delete(s.uploads, q.Get("uploadId"))
		s.mu.Unlock()
		if !ok {
			writeErr(w, http.StatusNotFound, "NoSuchUpload", q.Get("uploadId"))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut:
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		s.mu.Lock()
		if _, exists := objs[key]; exists && r.Header.Get("If-None-Match") == "*" {
			s.mu.Unlock()
			writeErr(w, http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
			return
		}
		o := &memObject{parts: [][]byte{body}, size: int64(len(body)), etag: s.etag(), modified: time.Now().UTC()}
		objs[key] = o
		s.mu.Unlock()
		w.Header().Set("ETag", o.etag)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		s.get(w, r, objs, key)
	case r.Method == http.MethodDelete:
		s.mu.Lock()
		delete(objs, key)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		writeErr(w, http.StatusNotImplemented, "NotImplemented", r.Method+" "+r.URL.String())
	}
}

func (s *MemServer) complete(w http.ResponseWriter, r *http.Request, bucket, key, id string) {
	var req struct {
		Parts []struct {
			PartNumber int `xml:"PartNumber"`
		} `xml:"Part"`
	}
	if err := xml.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, "MalformedXML", err.Error())
		return
	}
	s.mu.Lock()
	u := s.uploads[id]
	if u == nil {
		s.mu.Unlock()
		writeErr(w, http.StatusNotFound, "NoSuchUpload", id)
		return
	}
	o := &memObject{etag: fmt.Sprintf(`"%032x-%d"`, s.ids.Add(1), len(req.Parts)), modified: time.Now().UTC()}
	for i, p := range req.Parts {
		b, ok := u.parts[p.PartNumber]
		if !ok || (i > 0 && p.PartNumber <= req.Parts[i-1].PartNumber) {
			s.mu.Unlock()
			writeErr(w, http.StatusBadRequest, "InvalidPart", strconv.Itoa(p.PartNumber))
			return
		}
		o.parts = append(o.parts, b)
		o.size += int64(len(b))
	}
	delete(s.uploads, id)
	s.buckets[bucket][key] = o
	s.mu.Unlock()
	writeXML(w, struct {
		XMLName xml.Name `xml:"CompleteMultipartUploadResult"`
		Bucket  string   `xml:"Bucket"`
		Key     string   `xml:"Key"`
		ETag    string   `xml:"ETag"`
	}{Bucket: bucket, Key: key, ETag: o.etag})
}

func (s *MemServer) get(w http.ResponseWriter, r *http.Request, objs map[string]*memObject, key string) {
	s.mu.Lock()
	o := objs[key]
	s.mu.Unlock()
	if o == nil {
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		writeErr(w, http.StatusNotFound, "NoSuchKey", key)
		return
	}
	off, end := int64(0), o.size // [off, end)
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" {
		lo, hi, ok := parseRange(rg, o.size)
		if !ok {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", o.size))
			writeErr(w, http.StatusRequestedRangeNotSatisfiable, "InvalidRange", rg)
			return
		}
		off, end, status = lo, hi, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", lo, hi-1, o.size))
	}
	h := w.Header()
	h.Set("Content-Length", strconv.FormatInt(end-off, 10))
	h.Set("ETag", o.etag)
	h.Set("Last-Modified", o.modified.Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Type", "application/octet-stream")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	var pos int64
	for _, p := range o.parts {
		pl := int64(len(p))
		if pos+pl > off && pos < end {
			lo, hi := max(off-pos, 0), min(end-pos, pl)
			if _, err := w.Write(p[lo:hi]); err != nil {
				return
			}
		}
		pos += pl
	}
}

// parseRange handles "bytes=a-b", "bytes=a-" and "bytes=-n".
func parseRange(h string, size int64) (int64, int64, bool) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, _ := strings.Cut(spec, "-")
	if a == "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, false
		}
		return max(0, size-n), size, true
	}
	lo, err := strconv.ParseInt(a, 10, 64)
	if err != nil || lo >= size {
		return 0, 0, false
	}
	hi := size
	if b != "" {
		v, err := strconv.ParseInt(b, 10, 64)
		if err != nil || v < lo {
			return 0, 0, false
		}
		hi = min(v+1, size)
	}
	return lo, hi, true
}

func (s *MemServer) serveBucket(w http.ResponseWriter, r *http.Request, bucket string, objs map[string]*memObject, q map[string][]string) {
	has := func(k string) bool { _, ok := q[k]; return ok }
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	switch {
	case r.Method == http.MethodPut:
		s.mu.Lock()
		if s.buckets[bucket] == nil {
			s.buckets[bucket] = map[string]*memObject{}
		}
		s.mu.Unlock()
	case r.Method == http.MethodHead:
	case r.Method == http.MethodPost && has("delete"):
		var req struct {
			Objects []struct {
				Key string `xml:"Key"`
			} `xml:"Object"`
		}
		if err := xml.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, http.StatusBadRequest, "MalformedXML", err.Error())
			return
		}
		s.mu.Lock()
		for _, o := range req.Objects {
			delete(objs, o.Key)
		}
		s.mu.Unlock()
		writeXML(w, struct {
			XMLName xml.Name `xml:"DeleteResult"`
		}{})
	case r.Method == http.MethodGet && has("uploads"):
		type upload struct {
			Key      string `xml:"Key"`
			UploadID string `xml:"UploadId"`
			Started  string `xml:"Initiated"`
		}
		prefix := get("prefix")
		res := struct {
			XMLName xml.Name `xml:"ListMultipartUploadsResult"`
			Bucket  string   `xml:"Bucket"`
			Prefix  string   `xml:"Prefix"`
			Uploads []upload `xml:"Upload"`
		}{Bucket: bucket, Prefix: prefix}
		s.mu.Lock()
		for id, u := range s.uploads {
			if u.bucket == bucket && strings.HasPrefix(u.key, prefix) {
				res.Uploads = append(res.Uploads, upload{Key: u.key, UploadID: id, Started: u.started.Format(time.RFC3339)})
			}
		}
		s.mu.Unlock()
		slices.SortFunc(res.Uploads, func(a, b upload) int { return strings.Compare(a.Key+"\x00"+a.UploadID, b.Key+"\x00"+b.UploadID) })
		writeXML(w, res)
	case r.Method == http.MethodGet:
		prefix, delim := get("prefix"), get("delimiter")
		type content struct {
			Key          string `xml:"Key"`
			Size         int64  `xml:"Size"`
			ETag         string `xml:"ETag"`
			LastModified string `xml:"LastModified"`
		}
		type cp struct {
			Prefix string `xml:"Prefix"`
		}
		res := struct {
			XMLName        xml.Name  `xml:"ListBucketResult"`
			Name           string    `xml:"Name"`
			Prefix         string    `xml:"Prefix"`
			KeyCount       int       `xml:"KeyCount"`
			IsTruncated    bool      `xml:"IsTruncated"`
			Contents       []content `xml:"Contents"`
			CommonPrefixes []cp      `xml:"CommonPrefixes"`
		}{Name: bucket, Prefix: prefix}
		s.mu.Lock()
		keys := make([]string, 0, len(objs))
		for k := range objs {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		seen := map[string]bool{}
		for _, k := range keys {
			if delim != "" {
				if i := strings.Index(k[len(prefix):], delim); i >= 0 {
					p := k[:len(prefix)+i+len(delim)]
					if !seen[p] {
						seen[p] = true
						res.CommonPrefixes = append(res.CommonPrefixes, cp{p})
					}
					continue
				}
			}
			o := objs[k]
			res.Contents = append(res.Contents, content{Key: k, Size: o.size, ETag: o.etag, LastModified: o.modified.Format(time.RFC3339)})
		}
		s.mu.Unlock()
		res.KeyCount = len(res.Contents) + len(res.CommonPrefixes)
		writeXML(w, res)
	default:
		writeErr(w, http.StatusNotImplemented, "NotImplemented", r.Method+" "+r.URL.String())
	}
}
