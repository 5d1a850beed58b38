package metrics

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/durashuffle/durashuffle/store"
)

// Metric names, as documented in docs/sidecar.md.
const (
	UploadQueueChunks     = "durashuffle_upload_queue_chunks"
	UploadQueuedSeconds   = "durashuffle_upload_queued_seconds"
	UploadPartSeconds     = "durashuffle_upload_part_seconds"
	UploadBytesTotal      = "durashuffle_upload_bytes_total"
	ReadBytesTotal        = "durashuffle_read_bytes_total"
	RequestsTotal         = "durashuffle_requests_total"
	RetriesTotal          = "durashuffle_retries_total"
	UploadConcurrency     = "durashuffle_upload_concurrency"
	BufferedBytes         = "durashuffle_buffered_bytes"
	SidecarStreams        = "durashuffle_sidecar_streams"
	SidecarStreamsWait    = "durashuffle_sidecar_streams_waiting"
	SidecarCallsTotal     = "durashuffle_sidecar_calls_total"
	SidecarRowsTotal      = "durashuffle_sidecar_rows_total"
	SidecarCommitsTotal   = "durashuffle_sidecar_commits_total"
	SidecarAbortsTotal    = "durashuffle_sidecar_aborts_total"
	SidecarPanicsTotal    = "durashuffle_sidecar_panics_total"
	CommitGuard           = "durashuffle_commit_guard"
	MemstoreBytes         = "durashuffle_memstore_bytes"
	MemstoreAdmitted      = "durashuffle_memstore_admitted_bytes_total"
	MemstoreDeclined      = "durashuffle_memstore_declined_bytes_total"
	MemstoreEvicted       = "durashuffle_memstore_evicted_bytes_total"
	MemstoreReleased      = "durashuffle_memstore_released_bytes_total"
	ServedBytesTotal      = "durashuffle_served_bytes_total"
	FallbacksTotal        = "durashuffle_fallbacks_total"
	PeerSentBytesTotal    = "durashuffle_peer_sent_bytes_total"
	requestsHelp          = "Object-store requests sent, by SDK operation and HTTP status (none: no response arrived)."
	retriesHelp           = "Object-store requests retried, by SDK operation and reason (service code, HTTPnnn, reset, timeout)."
	uploadConcurrencyHelp = "Parts the upload pool lets in flight now (upload_concurrency, lowered while the store throttles)."
	commitGuardHelp       = "Commit guard state: 1 for the current one (unprobed, enforced, not_enforced: every commit refused, error: the last probe failed, off), 0 for the others."
)

// The label values that start at 0, so that a dashboard or an alert on a
// rate sees 0 rather than no data before the first event. They are the
// values of what they label, kept here so that metrics imports nothing
// above it; the root package's tests check them against their sources.
var (
	// ServedSources are the reader's sources (reader.SourceMemory,
	// SourcePeer, SourceS3), the source label of ServedBytesTotal.
	ServedSources = []string{"memory", "peer", "s3"}
	// FallbackReasons are the reader's fallback reasons
	// (reader.FallbackMiss...), the reason label of FallbacksTotal.
	FallbackReasons = []string{"miss", "checksum", "timeout", "refused", "unavailable", "error"}
	// CommitGuardStates are the commit guard's states
	// (durashuffle.GuardUnprobed...), the state label of CommitGuard.
	CommitGuardStates = []string{"unprobed", "enforced", "not_enforced", "error", "off"}
)

// Metrics holds durashuffle's collectors on a private registry (never the
// global one, so two instances in one process, as in tests, do not
// collide). Every method is safe for concurrent use; a nil *Metrics
// ignores every event, so callers need not check.
type Metrics struct {
	reg *prometheus.Registry

	queue       prometheus.Gauge
	queued      prometheus.Histogram
	part        prometheus.Histogram
	uploadBytes prometheus.Counter
	readBytes   prometheus.Counter
	buffered    prometheus.Gauge

	streams     *prometheus.GaugeVec
	waiting     prometheus.Gauge
	calls       *prometheus.CounterVec
	rows        *prometheus.CounterVec
	commits     prometheus.Counter
	aborts      prometheus.Counter
	panics      *prometheus.CounterVec
	memBytes    prometheus.Gauge
	memAdmitted prometheus.Counter
	memDeclined prometheus.Counter
	memEvicted  prometheus.Counter
	memReleased prometheus.Counter
	served      *prometheus.CounterVec
	fallbacks   *prometheus.CounterVec
	peerSent    prometheus.Counter

	counters  counterCollector
	concOnce  sync.Once
	guardOnce sync.Once
}

// New returns Metrics registered on a fresh registry together with the Go
// runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{Name: UploadQueueChunks,
			Help: "Parts encoded and waiting for an upload worker: a chunk each, or the parts an object's tail was re-cut into at Close."}),
		queued: prometheus.NewHistogram(prometheus.HistogramOpts{Name: UploadQueuedSeconds,
			Help:    "Time a chunk waited in the queue before its upload started.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}), // 1 ms .. 33 s
		part: prometheus.NewHistogram(prometheus.HistogramOpts{Name: UploadPartSeconds,
			Help:    "Time to upload one part (or single put), retries included.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}), // 10 ms .. 82 s
		uploadBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: UploadBytesTotal,
			Help: "Bytes stored by finished parts and single puts."}),
		readBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: ReadBytesTotal,
			Help: "Bytes read from the object store (ranged GETs and manifests)."}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{Name: BufferedBytes,
			Help: "Bytes held in chunk buffers (filling, queued or uploading); at most max_buffered_chunks x chunk_size."}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: SidecarStreams,
			Help: "Sidecar Flight streams being served, by method (each holds one of max_streams slots)."}, []string{"method"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: SidecarStreamsWait,
			Help: "Sidecar Flight streams waiting for one of max_streams slots."}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: SidecarCallsTotal,
			Help: "Sidecar Flight calls finished, by method and gRPC status code."}, []string{"method", "code"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: SidecarRowsTotal,
			Help: "Rows the sidecar received (DoPut) or sent (DoGet)."}, []string{"method"}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{Name: SidecarCommitsTotal,
			Help: "DoPut streams whose worker output was committed."}),
		aborts: prometheus.NewCounter(prometheus.CounterOpts{Name: SidecarAbortsTotal,
			Help: "DoPut streams aborted: cancelled, failed, rejected, ended without their commit message, or cut off at shutdown."}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: SidecarPanicsTotal,
			Help: "Panics in sidecar handlers, by method: each failed its call (Internal) and was logged with its stack; the process served on."}, []string{"method"}),
	}
	m.memBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: MemstoreBytes,
		Help: "Bytes the memory store holds or has reserved for writers uploading now; at most memory_store_bytes."})
	m.memAdmitted = prometheus.NewCounter(prometheus.CounterOpts{Name: MemstoreAdmitted,
		Help: "Bytes of committed workers admitted to the memory store."})
	m.memDeclined = prometheus.NewCounter(prometheus.CounterOpts{Name: MemstoreDeclined,
		Help: "Bytes of workers the memory store could not keep: the budget was taken by workers not yet read."})
	m.memEvicted = prometheus.NewCounter(prometheus.CounterOpts{Name: MemstoreEvicted,
		Help: "Bytes of workers already read evicted to admit others."})
	m.memReleased = prometheus.NewCounter(prometheus.CounterOpts{Name: MemstoreReleased,
		Help: "Bytes dropped from the memory store by release, delete-query, gc or a replaced worker."})
	m.served = prometheus.NewCounterVec(prometheus.CounterOpts{Name: ServedBytesTotal,
		Help: "Stored frame bytes readers received, by source: memory (this process), peer (another sidecar), s3."}, []string{"source"})
	m.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: FallbacksTotal,
		Help: "Ranges (frames, for checksum) read from S3 because memory or a peer fell short, by reason."}, []string{"reason"})
	m.peerSent = prometheus.NewCounter(prometheus.CounterOpts{Name: PeerSentBytesTotal,
		Help: "Stored bytes this sidecar's memory store served to peers."})
	for _, src := range ServedSources {
		m.served.WithLabelValues(src)
	}
	for _, r := range FallbackReasons {
		m.fallbacks.WithLabelValues(r)
	}
	// Known label values start at 0, so a dashboard or an alert on a
	// rate sees 0 rather than no data before the first event.
	for _, method := range SidecarMethods {
		m.streams.WithLabelValues(method)
		m.rows.WithLabelValues(method)
		m.panics.WithLabelValues(method)
		for _, code := range SidecarCodes {
			m.calls.WithLabelValues(method, code)
		}
	}
	m.counters.requests = prometheus.NewDesc(RequestsTotal, requestsHelp, []string{"op", "code"}, nil)
	m.counters.retries = prometheus.NewDesc(RetriesTotal, retriesHelp, []string{"op", "reason"}, nil)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.queue, m.queued, m.part, m.uploadBytes, m.readBytes, m.buffered,
		m.streams, m.waiting, m.calls, m.rows, m.commits, m.aborts, m.panics,
		m.memBytes, m.memAdmitted, m.memDeclined, m.memEvicted, m.memReleased, m.served, m.fallbacks, m.peerSent,
		&m.counters,
	)
	return m
}

// Registry returns the private registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Queued records parts queued (delta > 0) or taken by a worker (the
// uploader's Observer).
func (m *Metrics) Queued(delta int) {
	if m != nil {
		m.queue.Add(float64(delta))
	}
}

// Buffered records the bytes held in chunk buffers now.
func (m *Metrics) Buffered(bytes int64) {
	if m != nil {
		m.buffered.Set(float64(bytes))
	}
}

// PartDone records how long a part waited and how long it took.
func (m *Metrics) PartDone(queued, upload time.Duration) {
	if m != nil {
		m.queued.Observe(queued.Seconds())
		m.part.Observe(upload.Seconds())
	}
}

// Uploaded records bytes stored by a finished part or single put.
func (m *Metrics) Uploaded(bytes int64) {
	if m != nil {
		m.uploadBytes.Add(float64(bytes))
	}
}

// MemstoreBytes records the bytes the memory store holds or reserves
// now (the memory store's Observer).
func (m *Metrics) MemstoreBytes(n int64) {
	if m != nil {
		m.memBytes.Set(float64(n))
	}
}

// MemstoreAdmitted records a worker's bytes admitted to the memory store.
func (m *Metrics) MemstoreAdmitted(n int64) {
	if m != nil {
		m.memAdmitted.Add(float64(n))
	}
}

// MemstoreDeclined records bytes the memory store could not keep.
func (m *Metrics) MemstoreDeclined(n int64) {
	if m != nil {
		m.memDeclined.Add(float64(n))
	}
}

// MemstoreEvicted records bytes evicted to admit others.
func (m *Metrics) MemstoreEvicted(n int64) {
	if m != nil {
		m.memEvicted.Add(float64(n))
	}
}

// MemstoreReleased records bytes dropped by release, delete or gc.
func (m *Metrics) MemstoreReleased(n int64) {
	if m != nil {
		m.memReleased.Add(float64(n))
	}
}

// Served records n stored bytes a reader received from source (the
// reader's Observer).
func (m *Metrics) Served(source string, n int64) {
	if m != nil && n > 0 {
		m.served.WithLabelValues(source).Add(float64(n))
	}
}

// Fallback records a range read from S3 because memory or a peer fell
// short, for reason.
func (m *Metrics) Fallback(reason string) {
	if m != nil {
		m.fallbacks.WithLabelValues(reason).Inc()
	}
}

// PeerSent records n stored bytes served to a peer.
func (m *Metrics) PeerSent(n int64) {
	if m != nil {
		m.peerSent.Add(float64(n))
	}
}

// ReadBytes records n bytes read from the object store.
func (m *Metrics) ReadBytes(n int64) {
	if m != nil && n > 0 {
		m.readBytes.Add(float64(n))
	}
}

// WatchCounter exports c's request and retry counts as
// durashuffle_requests_total{op,code} and durashuffle_retries_total{op,reason}.
// They are read from c at scrape time, so requests made before the call
// count too, and c's observer hook stays free for others. A later call
// replaces c.
func (m *Metrics) WatchCounter(c *store.Counter) {
	if m == nil {
		return
	}
	m.counters.mu.Lock()
	m.counters.c = c
	m.counters.mu.Unlock()
}

// WatchConcurrency exports f(), called at scrape time, as
// durashuffle_upload_concurrency: the pool's effective value. Only the
// first call counts.
func (m *Metrics) WatchConcurrency(f func() int) {
	if m == nil {
		return
	}
	m.concOnce.Do(func() {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: UploadConcurrency, Help: uploadConcurrencyHelp},
			func() float64 { return float64(f()) }))
	})
}

// WatchCommitGuard exports the commit guard's state as
// durashuffle_commit_guard{state}: f, called at scrape time, returns the
// current one of states, which is 1; the others are 0, so an alert can
// match state="not_enforced" whether or not it ever happened. Only the
// first call counts.
func (m *Metrics) WatchCommitGuard(states []string, f func() string) {
	if m == nil {
		return
	}
	m.guardOnce.Do(func() {
		m.reg.MustRegister(&guardCollector{
			desc:   prometheus.NewDesc(CommitGuard, commitGuardHelp, []string{"state"}, nil),
			states: states,
			f:      f,
		})
	})
}

type guardCollector struct {
	desc   *prometheus.Desc
	states []string
	f      func() string
}

func (g *guardCollector) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *guardCollector) Collect(ch chan<- prometheus.Metric) {
	now := g.f()
	for _, s := range g.states {
		v := 0.0
		if s == now {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, s)
	}
}

// StreamStarted and StreamDone bracket a sidecar stream holding a slot.
func (m *Metrics) StreamStarted(method string) {
	if m != nil {
		m.streams.WithLabelValues(method).Inc()
	}
}

// StreamDone: see StreamStarted.
func (m *Metrics) StreamDone(method string) {
	if m != nil {
		m.streams.WithLabelValues(method).Dec()
	}
}

// StreamWaiting adds delta to the streams waiting for a slot.
func (m *Metrics) StreamWaiting(delta int) {
	if m != nil {
		m.waiting.Add(float64(delta))
	}
}

// Call records a finished sidecar call and its gRPC status code name.
func (m *Metrics) Call(method, code string) {
	if m != nil {
		m.calls.WithLabelValues(method, code).Inc()
	}
}

// Rows records rows received or sent by a sidecar method.
func (m *Metrics) Rows(method string, n int64) {
	if m != nil && n > 0 {
		m.rows.WithLabelValues(method).Add(float64(n))
	}
}

// Panic records a panic in a sidecar handler of method.
func (m *Metrics) Panic(method string) {
	if m != nil {
		m.panics.WithLabelValues(method).Inc()
	}
}

// PutDone records the end of a DoPut stream: committed or aborted.
func (m *Metrics) PutDone(committed bool) {
	switch {
	case m == nil:
	case committed:
		m.commits.Inc()
	default:
		m.aborts.Inc()
	}
}

// counterCollector turns a store.Counter's maps into counter samples at
// scrape time. The maps only grow, so the samples are monotonic.
type counterCollector struct {
	requests, retries *prometheus.Desc
	mu                sync.Mutex
	c                 *store.Counter
}

func (cc *counterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cc.requests
	ch <- cc.retries
}

func (cc *counterCollector) Collect(ch chan<- prometheus.Metric) {
	cc.mu.Lock()
	c := cc.c
	cc.mu.Unlock()
	if c == nil {
		return
	}
	for k, n := range c.Statuses() {
		code := "none"
		if k.Status != 0 {
			code = strconv.Itoa(k.Status)
		}
		ch <- prometheus.MustNewConstMetric(cc.requests, prometheus.CounterValue, float64(n), k.Op, code)
	}
	retries := c.Retries()
	for k, n := range retries {
		ch <- prometheus.MustNewConstMetric(cc.retries, prometheus.CounterValue, float64(n), k.Op, k.Reason)
	}
	for _, op := range RetryOps {
		for _, reason := range RetryReasons {
			if _, seen := retries[store.OpReason{Op: op, Reason: reason}]; !seen {
				ch <- prometheus.MustNewConstMetric(cc.retries, prometheus.CounterValue, 0, op, reason)
			}
		}
	}
}

// The label values exported at 0 before their first event.
var (
	// SidecarMethods: the Flight methods the sidecar serves.
	SidecarMethods = []string{"DoPut", "DoGet", "DoAction", "ListActions", "ListFlights", "GetFlightInfo", "GetSchema"}
	// SidecarCodes: the gRPC codes its calls end with.
	SidecarCodes = []string{"OK", "Canceled", "InvalidArgument", "NotFound", "AlreadyExists", "FailedPrecondition",
		"ResourceExhausted", "Aborted", "DeadlineExceeded", "Unauthenticated", "Unavailable", "Internal"}
	// RetryOps and RetryReasons: the requests of the write and read paths
	// and the failures that make them retry most.
	RetryOps     = []string{"PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "GetObject"}
	RetryReasons = []string{"SlowDown", "HTTP503", "HTTP500", "reset", "timeout", "other"}
)

// CountReads wraps st so that every byte read from a GetRange body adds to
// durashuffle_read_bytes_total. Everything else passes through.
func (m *Metrics) CountReads(st store.Store) store.Store {
	if m == nil {
		return st
	}
	return &readCounter{Store: st, m: m}
}

type readCounter struct {
	store.Store
	m *Metrics
}

func (r *readCounter) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	body, err := r.Store.GetRange(ctx, key, off, length)
	if err != nil {
		return nil, err
	}
	return &countingBody{ReadCloser: body, m: r.m}, nil
}

// Unwrap implements store.Unwrapper: store.As finds the capabilities of
// the store below (streamed parts), which a read counter does not see.
func (r *readCounter) Unwrap() store.Store { return r.Store }

type countingBody struct {
	io.ReadCloser
	m *Metrics
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.m.ReadBytes(int64(n))
	return n, err
}
