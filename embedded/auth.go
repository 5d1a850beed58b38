package embedded

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/xml"
	"hash"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/johannesboyne/gofakes3"
)

// Signature Version 4 as S3 speaks it.
const (
	sigAlgorithm  = "AWS4-HMAC-SHA256"
	amzDateLayout = "20060102T150405Z"
	// maxSkew is how far a request's time may be from the server's, as
	// S3 allows.
	maxSkew = 15 * time.Minute
	// maxPresignExpiry is S3's longest presigned URL, 7 days.
	maxPresignExpiry = 7 * 24 * time.Hour
	unsignedPayload  = "UNSIGNED-PAYLOAD"
)

// authError is a refusal, rendered as S3 renders it.
type authError struct {
	code, msg string
}

func denied(code, msg string) *authError { return &authError{code, msg} }

// requireSignature passes on only requests signed with creds (AWS
// Signature Version 4, in the Authorization header or a presigned URL's
// query) and answers every other one 403, before gofakes3 sees it. The
// signature is checked by signing the request again with the SDK's own
// signer: the headers the client says it signed, its method, path, query
// and payload hash. A hex payload hash is then checked against the body
// as it is read; UNSIGNED-PAYLOAD and the aws-chunked STREAMING-* bodies
// carry none (the seed signature in the header is checked; the chunk
// signatures are not).
func requireSignature(creds aws.Credentials, now func() time.Time, next http.Handler) http.Handler {
	signer := v4.NewSigner(func(o *v4.SignerOptions) {
		// S3 does not escape the path a second time.
		o.DisableURIPathEscaping = true
	})
	v := &verifier{creds: creds, now: now, signer: signer}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e := v.check(r); e != nil {
			writeDenied(w, r, e)
			return
		}
		if sha := r.Header.Get("X-Amz-Content-Sha256"); isHexSHA256(sha) && r.Body != nil {
			want, _ := hex.DecodeString(sha)
			r.Body = &shaBody{rc: r.Body, want: want, h: sha256.New()}
		}
		next.ServeHTTP(w, r)
	})
}

func writeDenied(w http.ResponseWriter, r *http.Request, e *authError) {
	w.Header().Set("Content-Type", "application/xml")
	// The body of a refused request is not read: the connection goes.
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusForbidden)
	if r.Method == http.MethodHead {
		return
	}
	w.Write([]byte(xml.Header))
	xml.NewEncoder(w).Encode(gofakes3.ErrorResponse{Code: gofakes3.ErrorCode(e.code), Message: e.msg})
}

type verifier struct {
	creds  aws.Credentials
	now    func() time.Time
	signer *v4.Signer
}

// scope is a parsed credential scope: KEY/DATE/REGION/SERVICE/aws4_request.
type scope struct {
	key, date, region, service string
}

func parseScope(s string) (scope, bool) {
	p := strings.Split(s, "/")
	if len(p) != 5 || p[4] != "aws4_request" || p[0] == "" || p[2] == "" {
		return scope{}, false
	}
	return scope{key: p[0], date: p[1], region: p[2], service: p[3]}, true
}

func (v *verifier) check(r *http.Request) *authError {
	if h := r.Header.Get("Authorization"); h != "" {
		return v.checkHeader(r, h)
	}
	if r.URL.Query().Has("X-Amz-Signature") {
		return v.checkPresigned(r)
	}
	return denied("AccessDenied", "anonymous request refused: the embedded S3 server takes only requests signed (AWS Signature Version 4) with its credentials")
}

// checkScope checks what a header and a presigned URL share: the key, the
// service, and that the scope's date is the request's.
func (v *verifier) checkScope(sc scope, date string) (time.Time, *authError) {
	if subtle.ConstantTimeCompare([]byte(sc.key), []byte(v.creds.AccessKeyID)) != 1 {
		return time.Time{}, denied("InvalidAccessKeyId", "the access key ID is not the embedded server's")
	}
	if sc.service != "s3" {
		return time.Time{}, denied("AccessDenied", "credential scope names service "+strconv.Quote(sc.service)+", not s3")
	}
	t, err := time.Parse(amzDateLayout, date)
	if err != nil {
		return time.Time{}, denied("AccessDenied", "X-Amz-Date "+strconv.Quote(date)+" is not a time such as 20060102T150405Z")
	}
	if sc.date != date[:8] {
		return time.Time{}, denied("SignatureDoesNotMatch", "credential scope date "+sc.date+" is not X-Amz-Date's "+date[:8])
	}
	return t, nil
}

func (v *verifier) checkHeader(r *http.Request, h string) *authError {
	rest, ok := strings.CutPrefix(h, sigAlgorithm+" ")
	if !ok {
		return denied("AccessDenied", "Authorization is not "+sigAlgorithm+" (Signature Version 4)")
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = val
	}
	sc, ok := parseScope(fields["Credential"])
	signed := fields["SignedHeaders"]
	if !ok || signed == "" || fields["Signature"] == "" {
		return denied("AccessDenied", "Authorization lacks Credential, SignedHeaders or Signature")
	}
	date := r.Header.Get("X-Amz-Date")
	t, e := v.checkScope(sc, date)
	if e != nil {
		return e
	}
	if d := v.now().Sub(t); d > maxSkew || d < -maxSkew {
		return denied("RequestTimeTooSkewed", "X-Amz-Date "+date+" is more than 15 minutes from the server's time")
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		return denied("AccessDenied", "X-Amz-Content-Sha256 is missing")
	}
	req, e := v.canonical(r, r.URL.Query(), signed)
	if e != nil {
		return e
	}
	if err := v.signer.SignHTTP(r.Context(), v.creds, req, payload, sc.service, sc.region, t); err != nil {
		return denied("AccessDenied", "sign: "+err.Error())
	}
	got := ""
	for _, f := range strings.Split(strings.TrimPrefix(req.Header.Get("Authorization"), sigAlgorithm+" "), ",") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(f), "Signature="); ok {
			got = s
		}
	}
	return matches(got, fields["Signature"])
}

func (v *verifier) checkPresigned(r *http.Request) *authError {
	q := r.URL.Query()
	if q.Get("X-Amz-Algorithm") != sigAlgorithm {
		return denied("AccessDenied", "X-Amz-Algorithm is not "+sigAlgorithm)
	}
	sc, ok := parseScope(q.Get("X-Amz-Credential"))
	signed := q.Get("X-Amz-SignedHeaders")
	if !ok || signed == "" {
		return denied("AccessDenied", "presigned URL lacks X-Amz-Credential or X-Amz-SignedHeaders")
	}
	date := q.Get("X-Amz-Date")
	t, e := v.checkScope(sc, date)
	if e != nil {
		return e
	}
	secs, err := strconv.Atoi(q.Get("X-Amz-Expires"))
	expires := time.Duration(secs) * time.Second
	if err != nil || secs < 1 || expires > maxPresignExpiry {
		return denied("AccessDenied", "X-Amz-Expires "+strconv.Quote(q.Get("X-Amz-Expires"))+" is not 1 to 604800 seconds")
	}
	if now := v.now(); now.After(t.Add(expires)) || t.Sub(now) > maxSkew {
		return denied("AccessDenied", "presigned URL expired at "+t.Add(expires).Format(time.RFC3339))
	}
	want := q.Get("X-Amz-Signature")
	q.Del("X-Amz-Signature")
	payload := q.Get("X-Amz-Content-Sha256")
	if payload == "" {
		payload = unsignedPayload
	}
	req, e := v.canonical(r, q, signed)
	if e != nil {
		return e
	}
	signedURL, _, err := v.signer.PresignHTTP(r.Context(), v.creds, req, payload, sc.service, sc.region, t,
		func(o *v4.SignerOptions) {
			o.DisableURIPathEscaping = true
			// The client's headers are headers, as it signed them.
			o.DisableHeaderHoisting = true
		})
	if err != nil {
		return denied("AccessDenied", "presign: "+err.Error())
	}
	u, err := url.Parse(signedURL)
	if err != nil {
		return denied("AccessDenied", "presign: "+err.Error())
	}
	return matches(u.Query().Get("X-Amz-Signature"), want)
}

// canonical is r as the client signed it: its method, path and query (q),
// its Host, and the headers in signed (a ;-separated list) with nothing
// else, for the signer to sign again.
func (v *verifier) canonical(r *http.Request, q url.Values, signed string) (*http.Request, *authError) {
	names := strings.Split(signed, ";")
	if !slices.Contains(names, "host") {
		return nil, denied("AccessDenied", "SignedHeaders "+strconv.Quote(signed)+" do not include host")
	}
	u := *r.URL
	u.Scheme, u.Host, u.RawQuery = "http", r.Host, q.Encode()
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), nil)
	if err != nil {
		return nil, denied("AccessDenied", "request URL: "+err.Error())
	}
	req.URL.RawPath, req.URL.Path = r.URL.RawPath, r.URL.Path
	req.Host = r.Host
	for _, name := range names {
		switch name {
		case "host":
		case "content-length":
			// The signer signs the length it is given, when positive.
			req.ContentLength = r.ContentLength
		default:
			if vals := r.Header.Values(name); len(vals) > 0 {
				req.Header[http.CanonicalHeaderKey(name)] = vals
			}
		}
	}
	return req, nil
}

func matches(got, want string) *authError {
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return denied("SignatureDoesNotMatch", "the request signature does not match the one computed with the embedded server's credentials")
	}
	return nil
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// shaBody fails the final read if the body is not the one whose SHA-256
// the client signed.
type shaBody struct {
	rc   io.ReadCloser
	want []byte
	h    hash.Hash
}

func (b *shaBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.h.Write(p[:n])
	if err == io.EOF && subtle.ConstantTimeCompare(b.h.Sum(nil), b.want) != 1 {
		return n, gofakes3.ErrorMessage(gofakes3.ErrBadDigest,
			"The provided 'x-amz-content-sha256' header does not match what was computed.")
	}
	return n, err
}

func (b *shaBody) Close() error { return b.rc.Close() }
