package metrics

import (
	"time"

	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/uploader"
	"github.com/prometheus/client_golang/prometheus"
)

// Library is the metrics of one library client, for a registerer of the
// caller's (durashuffle.WithRegisterer): the upload pool's, the request
// and retry counts and the commit guard, under the names the sidecar
// exports. It has no Go runtime, process or sidecar metrics: the
// program owns those.
type Library struct {
	queue       prometheus.Gauge
	queued      prometheus.Histogram
	part        prometheus.Histogram
	uploadBytes prometheus.Counter
	buffered    prometheus.Gauge
	counters    counterCollector
}

var _ uploader.Observer = (*Library)(nil)

// NewLibrary returns the metrics, not yet registered: pass it to the
// upload pool as its observer, then Register it.
func NewLibrary() *Library {
	m := New() // the same definitions as the sidecar's
	l := &Library{queue: m.queue, queued: m.queued, part: m.part, uploadBytes: m.uploadBytes, buffered: m.buffered}
	l.counters.requests = m.counters.requests
	l.counters.retries = m.counters.retries
	return l
}

// Register registers the metrics on reg, reading c's request and retry
// counts, concurrency() and guard() (one of states) at scrape time. It
// fails, registering nothing, if reg already holds one of them.
func (l *Library) Register(reg prometheus.Registerer, c *store.Counter, concurrency func() int, states []string, guard func() string) error {
	l.counters.c = c
	cs := []prometheus.Collector{
		l.queue, l.queued, l.part, l.uploadBytes, l.buffered, &l.counters,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: UploadConcurrency, Help: uploadConcurrencyHelp},
			func() float64 { return float64(concurrency()) }),
		&guardCollector{desc: prometheus.NewDesc(CommitGuard, commitGuardHelp, []string{"state"}, nil), states: states, f: guard},
	}
	for i, col := range cs {
		if err := reg.Register(col); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	return nil
}

// Queued implements uploader.Observer.
func (l *Library) Queued(delta int) { l.queue.Add(float64(delta)) }

// Buffered implements uploader.Observer.
func (l *Library) Buffered(bytes int64) { l.buffered.Set(float64(bytes)) }

// PartDone implements uploader.Observer.
func (l *Library) PartDone(queued, upload time.Duration) {
	l.queued.Observe(queued.Seconds())
	l.part.Observe(upload.Seconds())
}

// Uploaded implements uploader.Observer.
func (l *Library) Uploaded(bytes int64) { l.uploadBytes.Add(float64(bytes)) }
