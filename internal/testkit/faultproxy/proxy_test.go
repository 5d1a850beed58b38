package faultproxy

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// upstream is a fake S3 server: it records what reached it and answers
// GETs with body, everything else with an empty 200.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []*http.Request
	body []byte // answer to GET
}

func newUpstream(t *testing.T, body []byte) *upstream {
	u := &upstream{body: body}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("upstream: read body: %v", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		u.mu.Lock()
		u.seen = append(u.seen, r)
		u.mu.Unlock()
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("ETag", `"e`+strconv.Itoa(len(b))+`"`)
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Length", strconv.Itoa(len(u.body)))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(u.body)
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.seen...)
}

func start(t *testing.T, target string, spec Spec) *Proxy {
	t.Helper()
	p, err := Start(target, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

// client never reuses connections, so a broken one cannot be retried
// behind the test's back by the transport.
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
}

func do(t *testing.T, c *http.Client, method, url string, body []byte) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func TestForwardsUntouched(t *testing.T) {
	up := newUpstream(t, []byte("object bytes"))
	p := start(t, up.URL, Spec{})
	req, _ := http.NewRequest(http.MethodPut, p.URL()+"/bucket/dir/a%20b%2Fc?partNumber=3&uploadId=x%2By", strings.NewReader("part body"))
	req.Host = "signed-host:9000"
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=x")
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	resp, err := client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "yes" || resp.Header.Get("ETag") != `"e9"` {
		t.Fatalf("response %d %v", resp.StatusCode, resp.Header)
	}
	seen := up.requests()
	if len(seen) != 1 {
		t.Fatalf("upstream saw %d requests", len(seen))
	}
	got := seen[0]
	b, _ := io.ReadAll(got.Body)
	if got.Host != "signed-host:9000" || got.RequestURI != "/bucket/dir/a%20b%2Fc?partNumber=3&uploadId=x%2By" ||
		got.Header.Get("Authorization") != "AWS4-HMAC-SHA256 Credential=x" || string(b) != "part body" ||
		got.ContentLength != 9 || got.Header.Get("User-Agent") != "Go-http-client/1.1" {
		t.Fatalf("upstream got host %q uri %q headers %v body %q (len %d)", got.Host, got.RequestURI, got.Header, b, got.ContentLength)
	}

	resp, body, err := do(t, client(), http.MethodGet, p.URL()+"/bucket/k", nil)
	if err != nil || resp.StatusCode != http.StatusPartialContent || string(body) != "object bytes" {
		t.Fatalf("GET: %v %v %q", err, resp, body)
	}
	st := p.Stats()
	if st.Total() != 0 || st.Requests["UploadPart"] != 1 || st.Requests["GetObject"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestErrorAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   Spec
		status int
		code   string
		fault  Fault
	}{
		{"slowdown", Spec{SlowDown: 1}, 503, "SlowDown", FaultSlowDown},
		{"internal", Spec{Internal: 1}, 500, "InternalError", FaultInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, nil)
			p := start(t, up.URL, tc.spec)
			// A 1 MiB body: the answer must arrive whole, not as a broken pipe.
			resp, body, err := do(t, client(), http.MethodPut, p.URL()+"/b/key", make([]byte, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			var e struct {
				Code, Message, Resource, RequestId string
			}
			if err := xml.Unmarshal(body, &e); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if resp.StatusCode != tc.status || e.Code != tc.code || e.Resource != "/b/key" || e.RequestId == "" ||
				resp.Header.Get("Content-Type") != "application/xml" {
				t.Fatalf("got %d %+v %v", resp.StatusCode, e, resp.Header)
			}
			if n := len(up.requests()); n != 0 {
				t.Fatalf("upstream saw %d requests", n)
			}
			if got := p.Stats().Injected[Injection{"PutObject", tc.fault}]; got != 1 {
				t.Fatalf("stats %v", p.Stats())
			}
			// HEAD gets the status without a body.
			resp, body, err = do(t, client(), http.MethodHead, p.URL()+"/b/key", nil)
			if err != nil || resp.StatusCode != tc.status || len(body) != 0 {
				t.Fatalf("HEAD: %v %v %q", err, resp, body)
			}
		})
	}
}

func TestResetWhileBodyInFlight(t *testing.T) {
	up := newUpstream(t, nil)
	p := start(t, up.URL, Spec{Reset: 1, Seed: 3})
	for i := range 5 {
		_, _, err := do(t, client(), http.MethodPut, p.URL()+"/b/part?partNumber=1&uploadId=u", make([]byte, 8<<20))
		if err == nil {
			t.Fatalf("PUT %d succeeded through a reset", i)
		}
		// The client's read side sees the RST and closes the connection,
		// so its write side may report the close rather than the reset.
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, net.ErrClosed) {
			t.Fatalf("PUT %d: %v, want a connection reset", i, err)
		}
	}
	_, _, err := do(t, client(), http.MethodGet, p.URL()+"/b/k", nil)
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Fatalf("GET: %v, want a reset", err)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("upstream saw %d requests", n)
	}
	if st := p.Stats(); st.Injected[Injection{"UploadPart", FaultReset}] != 5 || st.Injected[Injection{"GetObject", FaultReset}] != 1 {
		t.Fatalf("stats %v", st)
	}
}

func TestTruncatedBody(t *testing.T) {
	object := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	up := newUpstream(t, object)
	p := start(t, up.URL, Spec{Truncate: 1, Seed: 11})
	for range 5 {
		resp, body, err := do(t, client(), http.MethodGet, p.URL()+"/b/k", nil)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("GET: %v, want unexpected EOF", err)
		}
		if resp.ContentLength != int64(len(object)) || len(body) >= len(object) || !bytes.Equal(body, object[:len(body)]) {
			t.Fatalf("Content-Length %d, got %d bytes, want a prefix of %d", resp.ContentLength, len(body), len(object))
		}
	}
	// An answer without a body has nothing to cut: it arrives whole and
	// is not counted.
	resp, _, err := do(t, client(), http.MethodPut, p.URL()+"/b/k", []byte("x"))
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("ETag") != `"e1"` {
		t.Fatalf("PUT: %v %v", err, resp)
	}
	st := p.Stats()
	if st.Injected[Injection{"GetObject", FaultTruncate}] != 5 || st.ByFault()[FaultTruncate] != 5 || len(up.requests()) != 6 {
		t.Fatalf("stats %v, upstream saw %d", st, len(up.requests()))
	}
}

func TestSpikeDelays(t *testing.T) {
	up := newUpstream(t, []byte("x"))
	p := start(t, up.URL, Spec{Spike: 1, SpikeDelay: 80 * time.Millisecond})
	t0 := time.Now()
	if _, _, err := do(t, client(), http.MethodGet, p.URL()+"/b/k", nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 80*time.Millisecond {
		t.Fatalf("request took %v through an 80ms spike", d)
	}
	if p.Stats().ByFault()[FaultSpike] != 1 {
		t.Fatalf("stats %v", p.Stats())
	}
}

func TestRateLimit(t *testing.T) {
	up := newUpstream(t, nil)
	p := start(t, up.URL, Spec{RateLimit: 20, Burst: 3})
	c := &http.Client{}
	status := map[int]int{}
	for range 10 {
		resp, _, err := do(t, c, http.MethodPut, p.URL()+"/b/k", []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		status[resp.StatusCode]++
	}
	// The burst passes, and perhaps a token earned while the loop ran.
	if status[200] < 3 || status[200] > 4 || status[503] != 10-status[200] {
		t.Fatalf("statuses %v: want the burst of 3 admitted and the rest throttled", status)
	}
	if got := p.Stats().ByFault()[FaultThrottle]; got != int64(status[503]) {
		t.Fatalf("throttle count %d, 503s %d", got, status[503])
	}
	time.Sleep(200 * time.Millisecond) // 4 tokens earned, 3 kept
	ok := 0
	for range 4 {
		if resp, _, _ := do(t, c, http.MethodPut, p.URL()+"/b/k", []byte("x")); resp != nil && resp.StatusCode == 200 {
			ok++
		}
	}
	if ok != 3 {
		t.Fatalf("%d admitted after the bucket refilled, want 3", ok)
	}
	// Lifting the limit admits everything.
	if err := p.SetSpec(Spec{}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if resp, _, err := do(t, c, http.MethodPut, p.URL()+"/b/k", []byte("x")); err != nil || resp.StatusCode != 200 {
			t.Fatalf("after lifting the limit: %v %v", err, resp)
		}
	}
}

func TestStallHoldsOneRequest(t *testing.T) {
	up := newUpstream(t, []byte("x"))
	p := start(t, up.URL, Spec{})
	p.StallNth("GetObject", 3, time.Minute)
	c := &http.Client{Timeout: 300 * time.Millisecond}
	var stalled []int
	for i := 1; i <= 5; i++ {
		if _, _, err := do(t, c, http.MethodGet, p.URL()+"/b/k", nil); err != nil {
			stalled = append(stalled, i)
		}
		if _, _, err := do(t, c, http.MethodPut, p.URL()+"/b/k", []byte("x")); err != nil {
			t.Fatalf("PUT %d: %v", i, err)
		}
	}
	if fmt.Sprint(stalled) != "[3]" {
		t.Fatalf("requests %v failed, want only the 3rd GET stalled", stalled)
	}
	if st := p.Stats(); st.Injected[Injection{"GetObject", FaultStall}] != 1 || st.Total() != 1 {
		t.Fatalf("stats %v", st)
	}
}

// TestStallCountsOnlyItsPart arms a stall on the 2nd UploadPart of part
// 1: parts 2 and 3 pass whatever their order, and only the second part 1
// is held.
func TestStallCountsOnlyItsPart(t *testing.T) {
	up := newUpstream(t, nil)
	p := start(t, up.URL, Spec{})
	p.Stall(Stall{Op: "UploadPart", Nth: 2, Part: 1, Delay: time.Minute})
	c := &http.Client{Timeout: 300 * time.Millisecond}
	var stalled []string
	for i := 1; i <= 3; i++ {
		for _, part := range []int{2, 1, 3} {
			u := fmt.Sprintf("%s/b/k?partNumber=%d&uploadId=u%d", p.URL(), part, i)
			if _, _, err := do(t, c, http.MethodPut, u, []byte("x")); err != nil {
				stalled = append(stalled, fmt.Sprintf("upload %d part %d", i, part))
			}
		}
	}
	if fmt.Sprint(stalled) != "[upload 2 part 1]" {
		t.Fatalf("stalled %v, want only upload 2's part 1", stalled)
	}
	if st := p.Stats(); st.Requests["UploadPart"] != 9 || st.Injected[Injection{"UploadPart", FaultStall}] != 1 {
		t.Fatalf("stats %v", st)
	}
}

func TestCloseEndsStalls(t *testing.T) {
	up := newUpstream(t, nil)
	p, err := Start(up.URL, Spec{Stall: Stall{Op: "PutObject", Nth: 1, Delay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, _, err := do(t, client(), http.MethodPut, p.URL()+"/b/k", make([]byte, 4<<20))
		errc <- err
	}()
	for p.Stats().Requests["PutObject"] == 0 {
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("close took %v", d)
	}
	if err := <-errc; err == nil {
		t.Fatal("stalled request succeeded after close")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// outcomes sends n requests one at a time and records what each met.
func outcomes(t *testing.T, spec Spec, n int) (string, Stats) {
	up := newUpstream(t, bytes.Repeat([]byte("y"), 1000))
	p := start(t, up.URL, spec)
	var b strings.Builder
	for range n {
		resp, _, err := do(t, client(), http.MethodGet, p.URL()+"/b/k", nil)
		switch {
		case err != nil && resp != nil:
			b.WriteByte('t')
		case err != nil:
			b.WriteByte('r')
		case resp.StatusCode == 503:
			b.WriteByte('s')
		case resp.StatusCode == 500:
			b.WriteByte('i')
		default:
			b.WriteByte('.')
		}
	}
	return b.String(), p.Stats()
}

func TestSeedFixesTheSequence(t *testing.T) {
	spec := Spec{SlowDown: 0.2, Internal: 0.1, Reset: 0.1, Truncate: 0.1, Seed: 42}
	const n = 400
	a, st := outcomes(t, spec, n)
	b, _ := outcomes(t, spec, n)
	if a != b {
		t.Fatalf("same seed, different faults:\n%s\n%s", a, b)
	}
	spec.Seed = 43
	if c, _ := outcomes(t, spec, n); c == a {
		t.Fatal("another seed gave the same faults")
	}
	// The rates are what the spec says, within a wide margin.
	for f, want := range map[Fault]float64{FaultSlowDown: 0.2, FaultInternal: 0.1, FaultReset: 0.1, FaultTruncate: 0.1} {
		got := float64(st.ByFault()[f]) / n
		if got < want/2 || got > want*1.6 {
			t.Errorf("%s: %.3f of requests, want about %.2f", f, got, want)
		}
	}
	if strings.Count(a, "s") != int(st.ByFault()[FaultSlowDown]) || strings.Count(a, "t") != int(st.ByFault()[FaultTruncate]) {
		t.Errorf("outcomes %q disagree with stats %v", a, st)
	}
}

func TestConcurrentRequests(t *testing.T) {
	up := newUpstream(t, bytes.Repeat([]byte("z"), 32<<10))
	p := start(t, up.URL, Spec{SlowDown: 0.1, Reset: 0.1, Truncate: 0.1, Spike: 0.1, SpikeDelay: time.Millisecond, Seed: 1})
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 8 {
		wg.Go(func() {
			c := &http.Client{}
			for range 25 {
				resp, body, err := do(t, c, http.MethodGet, p.URL()+"/b/k", nil)
				if err == nil && resp.StatusCode == 206 && len(body) == 32<<10 {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := p.Stats()
	if st.Requests["GetObject"] < 200 || ok.Load() == 0 || st.Total() == 0 {
		t.Fatalf("ok %d, stats %v", ok.Load(), st)
	}
}

func TestOperation(t *testing.T) {
	for _, tc := range []struct{ method, target, copySrc, want string }{
		{"GET", "/", "", "ListBuckets"},
		{"HEAD", "/b", "", "HeadBucket"},
		{"PUT", "/b", "", "CreateBucket"},
		{"PUT", "/b/", "", "CreateBucket"},
		{"GET", "/b?list-type=2&prefix=x", "", "ListObjectsV2"},
		{"GET", "/b?uploads", "", "ListMultipartUploads"},
		{"GET", "/b?location", "", "GetBucketLocation"},
		{"POST", "/b?delete", "", "DeleteObjects"},
		{"PUT", "/b/k/x.arrows", "", "PutObject"},
		{"PUT", "/b/k?partNumber=2&uploadId=u", "", "UploadPart"},
		{"PUT", "/b/k?partNumber=2&uploadId=u", "/b/src", "UploadPartCopy"},
		{"PUT", "/b/k", "/b/src", "CopyObject"},
		{"POST", "/b/k?uploads", "", "CreateMultipartUpload"},
		{"POST", "/b/k?uploadId=u", "", "CompleteMultipartUpload"},
		{"DELETE", "/b/k?uploadId=u", "", "AbortMultipartUpload"},
		{"DELETE", "/b/k", "", "DeleteObject"},
		{"GET", "/b/k", "", "GetObject"},
		{"GET", "/b/k?uploadId=u", "", "ListParts"},
		{"HEAD", "/b/k", "", "HeadObject"},
		{"PATCH", "/b/k", "", "Other"},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		if tc.copySrc != "" {
			r.Header.Set("X-Amz-Copy-Source", tc.copySrc)
		}
		if got := Operation(r); got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.method, tc.target, got, tc.want)
		}
	}
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Spec
		err      string
	}{
		{name: "empty", in: ""},
		{name: "the bench example", in: "slowdown=0.1,internal=0.02,reset=0.02,truncate=0.01,spike=0.01:500ms,seed=7",
			want: Spec{SlowDown: 0.1, Internal: 0.02, Reset: 0.02, Truncate: 0.01, Spike: 0.01, SpikeDelay: 500 * time.Millisecond, Seed: 7}},
		{name: "spike without delay", in: "spike=0.5", want: Spec{Spike: 0.5}},
		{name: "throttle", in: " rate=50 , burst=5 ", want: Spec{RateLimit: 50, Burst: 5}},
		{name: "stall", in: "stall=UploadPart:5:30s", want: Spec{Stall: Stall{Op: "UploadPart", Nth: 5, Delay: 30 * time.Second}}},
		{name: "last wins", in: "seed=1,seed=2", want: Spec{Seed: 2}},
		{name: "some operations", in: "truncate=1,ops=CreateMultipartUpload+CompleteMultipartUpload",
			want: Spec{Truncate: 1, Ops: []string{"CreateMultipartUpload", "CompleteMultipartUpload"}}},
		{name: "empty operation", in: "ops=UploadPart+", err: "ops must name operations"},
		{name: "unknown key", in: "slowdwn=0.1", err: `unknown key "slowdwn"`},
		{name: "not a pair", in: "slowdown", err: `"slowdown" is not key=value`},
		{name: "rate above 1", in: "reset=1.5", err: "reset must be a probability between 0 and 1"},
		{name: "negative", in: "internal=-0.1", err: "internal must be a probability"},
		{name: "NaN", in: "truncate=NaN", err: "truncate must be a probability"},
		{name: "sum above 1", in: "slowdown=0.6,internal=0.6", err: "must be at most 1"},
		{name: "bad delay", in: "spike=0.1:soon", err: "spike delay must be a duration"},
		{name: "bad seed", in: "seed=-1", err: "seed must be an unsigned integer"},
		{name: "bad rate", in: "rate=-3", err: "rate must be 0"},
		{name: "bad stall", in: "stall=UploadPart:0:1s", err: "stall request number"},
		{name: "short stall", in: "stall=UploadPart:1", err: "stall must be OP:N:DELAY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSpec(tc.in)
			if tc.err != "" {
				if err == nil || !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			again, err := ParseSpec(got.String())
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("round trip through %q: %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestStartRejects(t *testing.T) {
	if _, err := Start("127.0.0.1:9000", Spec{}); err == nil {
		t.Error("target without a scheme accepted")
	}
	if _, err := Start("http://127.0.0.1:9000", Spec{SlowDown: 2}); !errors.Is(err, ErrSpec) {
		t.Errorf("invalid spec: %v", err)
	}
}

func TestStatsString(t *testing.T) {
	s := Stats{Requests: map[string]int64{"UploadPart": 10, "GetObject": 5},
		Injected: map[Injection]int64{{"UploadPart", FaultSlowDown}: 2, {"GetObject", FaultSlowDown}: 3, {"UploadPart", FaultReset}: 1}}
	want := "requests 15; faults 6: slowdown 5 (GetObject 3, UploadPart 2), reset 1 (UploadPart 1)"
	if got := s.String(); got != want {
		t.Fatalf("%s\nwant %s", got, want)
	}
	sum := s.Add(s)
	if sum.Total() != 12 || sum.TotalRequests() != 30 || s.Total() != 6 {
		t.Fatalf("add: %v (and s is now %v)", sum, s)
	}
}

func TestOpsLimitFaults(t *testing.T) {
	up := newUpstream(t, []byte("x"))
	p := start(t, up.URL, Spec{SlowDown: 1, Ops: []string{"PutObject"}})
	for range 3 {
		if resp, _, err := do(t, client(), http.MethodGet, p.URL()+"/b/k", nil); err != nil || resp.StatusCode != 206 {
			t.Fatalf("GET: %v %v", err, resp)
		}
		if resp, _, err := do(t, client(), http.MethodPut, p.URL()+"/b/k", []byte("x")); err != nil || resp.StatusCode != 503 {
			t.Fatalf("PUT: %v %v", err, resp)
		}
	}
	if st := p.Stats(); st.Total() != 3 || st.Injected[Injection{"PutObject", FaultSlowDown}] != 3 {
		t.Fatalf("stats %v", st)
	}
}

// TestFirstOfEachOperation: Spec.First lands on each operation's first
// request and on no later one; a truncate waits for an answer with a
// body (the PUT's empty answer is sent whole, the GET's is cut).
func TestFirstOfEachOperation(t *testing.T) {
	up := newUpstream(t, []byte("object bytes"))
	p := start(t, up.URL, Spec{First: FaultInternal})
	for i := range 3 {
		want := 200
		if i == 0 {
			want = 500
		}
		if resp, _, err := do(t, client(), http.MethodPut, p.URL()+"/b/k", []byte("x")); err != nil || resp.StatusCode != want {
			t.Fatalf("PUT %d: %v %v, want %d", i, err, resp, want)
		}
		if want == 200 {
			want = 206
		}
		if resp, _, err := do(t, client(), http.MethodGet, p.URL()+"/b/k", nil); err != nil || resp.StatusCode != want {
			t.Fatalf("GET %d: %v %v, want %d", i, err, resp, want)
		}
	}
	if st := p.Stats(); st.Total() != 2 || st.Injected[Injection{"PutObject", FaultInternal}] != 1 || st.Injected[Injection{"GetObject", FaultInternal}] != 1 {
		t.Fatalf("stats %v", st)
	}

	p = start(t, up.URL, Spec{First: FaultTruncate})
	if resp, _, err := do(t, client(), http.MethodPut, p.URL()+"/b/k", []byte("x")); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT under first=truncate: %v %v", err, resp)
	}
	if _, _, err := do(t, client(), http.MethodGet, p.URL()+"/b/k", nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("first GET under first=truncate: %v, want a cut body", err)
	}
	if _, b, err := do(t, client(), http.MethodGet, p.URL()+"/b/k", nil); err != nil || string(b) != "object bytes" {
		t.Fatalf("second GET: %q %v", b, err)
	}
	if st := p.Stats(); st.Total() != 1 || st.Injected[Injection{"GetObject", FaultTruncate}] != 1 {
		t.Fatalf("stats %v", st)
	}
	if _, err := ParseSpec("first=stall"); !errors.Is(err, ErrSpec) {
		t.Errorf("first=stall: %v, want ErrSpec", err)
	}
	if s, err := ParseSpec("first=reset,seed=3"); err != nil || s.First != FaultReset || s.String() != "first=reset,seed=3" {
		t.Errorf("first=reset: %+v %v", s, err)
	}
}

// TestOperationAzureAndGCS: requests of Azure's Blob service (they carry
// x-ms-version) and of GCS's JSON API (their paths) are named in their
// own service's words, as azstore and gcsstore count them.
func TestOperationAzureAndGCS(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		azure          bool
		want           string
	}{
		{"PUT", "/acct/c?restype=container", true, "CreateContainer"},
		{"GET", "/acct/c?restype=container&comp=list&prefix=q", true, "ListBlobs"},
		{"POST", "/acct/c?restype=container&comp=batch", true, "BlobBatch"},
		{"PUT", "/acct/c/q/k?comp=block&blockid=AAA", true, "PutBlock"},
		{"PUT", "/acct/c/q/k?comp=blocklist", true, "PutBlockList"},
		{"GET", "/acct/c/q/k?comp=blocklist&blocklisttype=uncommitted", true, "GetBlockList"},
		{"PUT", "/acct/c/q/k", true, "PutBlob"},
		{"GET", "/acct/c/q/k", true, "GetBlob"},
		{"HEAD", "/acct/c/q/k", true, "GetBlobProperties"},
		{"DELETE", "/acct/c/q/k", true, "DeleteBlob"},
		{"POST", "/upload/storage/v1/b/bk/o?uploadType=multipart", false, "objects.insert"},
		{"POST", "/storage/v1/b/bk/o/q%2Fk/compose", false, "objects.compose"},
		{"GET", "/storage/v1/b/bk/o/q%2Fk?alt=media", false, "objects.get"},
		{"GET", "/storage/v1/b/bk/o?prefix=q", false, "objects.list"},
		{"DELETE", "/storage/v1/b/bk/o/q%2Fk", false, "objects.delete"},
		{"GET", "/storage/v1/b/bk", false, "buckets.get"},
		{"POST", "/storage/v1/b?project=p", false, "buckets.insert"},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		want := ServiceGCS
		if tc.azure {
			r.Header.Set("x-ms-version", "2025-01-05")
			want = ServiceAzure
		}
		if got := ServiceOf(r); got != want {
			t.Errorf("%s %s: service %s, want %s", tc.method, tc.target, got, want)
		}
		if got := Operation(r); got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.method, tc.target, got, tc.want)
		}
	}
}

// TestErrorsInEachServicesWords: a refused request is answered as its
// own service answers: Azure's ServerBusy and OperationTimedOut with
// x-ms-error-code, GCS's JSON error object with its reason.
func TestErrorsInEachServicesWords(t *testing.T) {
	up := newUpstream(t, []byte("data"))
	for _, tc := range []struct {
		fault                Fault
		azure                bool
		path                 string
		status               int
		header, code, inBody string
	}{
		{FaultSlowDown, true, "/acct/c/k?comp=block&blockid=AA", 503, "X-Ms-Error-Code", "ServerBusy", "<Code>ServerBusy</Code>"},
		{FaultInternal, true, "/acct/c/k?comp=block&blockid=AA", 500, "X-Ms-Error-Code", "OperationTimedOut", "<Code>OperationTimedOut</Code>"},
		{FaultSlowDown, false, "/upload/storage/v1/b/bk/o?uploadType=multipart", 429, "", "", `"reason":"rateLimitExceeded"`},
		{FaultInternal, false, "/upload/storage/v1/b/bk/o?uploadType=multipart", 503, "", "", `"reason":"backendError"`},
		{FaultSlowDown, false, "/bk/k", 503, "", "", "<Code>SlowDown</Code>"},
	} {
		p := start(t, up.URL, Only(tc.fault, 1, 1))
		method := http.MethodPut
		if !tc.azure && strings.HasPrefix(tc.path, "/upload/") {
			method = http.MethodPost
		}
		req, _ := http.NewRequest(method, p.URL()+tc.path, strings.NewReader("body"))
		if tc.azure {
			req.Header.Set("x-ms-version", "2025-01-05")
		}
		resp, err := client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.inBody) {
			t.Errorf("%s on %s: %d %s, want %d with %s", tc.fault, tc.path, resp.StatusCode, body, tc.status, tc.inBody)
		}
		if tc.header != "" && resp.Header.Get(tc.header) != tc.code {
			t.Errorf("%s on %s: %s %q, want %q", tc.fault, tc.path, tc.header, resp.Header.Get(tc.header), tc.code)
		}
		if len(up.requests()) != 0 {
			t.Errorf("%s on %s: the refused request reached the server", tc.fault, tc.path)
		}
	}
}
