package metrics

import (
	"github.com/durashuffle/durashuffle/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Library is the metrics of one library client, for a registerer of the
// caller's (durashuffle.WithRegisterer): the upload pool's, the request
// and retry counts, the commit guard, the memory store and the bytes read
// by source, under the names the sidecar exports. It has no Go runtime, process or sidecar metrics: the
// program owns those.
type Library struct {
	*Metrics // the sidecar's definitions; only the client's are registered
	counters counterCollector
}

// NewLibrary returns the metrics, not yet registered: pass it to the
// upload pool, the memory store and the reader as their observer, then
// Register it.
func NewLibrary() *Library {
	m := New()
	l := &Library{Metrics: m}
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
		l.memBytes, l.memAdmitted, l.memDeclined, l.memEvicted, l.memReleased, l.served, l.fallbacks,
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
