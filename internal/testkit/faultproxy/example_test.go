package faultproxy_test

import (
	"fmt"

	"github.com/durashuffle/durashuffle/internal/testkit/faultproxy"
)

// The spec of `durashuffle bench --faults`, and the proxy it starts in
// front of an S3 endpoint; the client then uses p.URL() as its endpoint.
func ExampleParseSpec() {
	spec, err := faultproxy.ParseSpec("slowdown=0.1,internal=0.02,reset=0.02,truncate=0.01,spike=0.01:500ms,seed=7")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(spec.SlowDown, spec.SpikeDelay, spec.Seed)
	p, err := faultproxy.Start("http://127.0.0.1:9000", spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	fmt.Println(p.Stats().Total(), "faults before any request")

	_, err = faultproxy.ParseSpec("slowdown=0.6,internal=0.6")
	fmt.Println(err)
	// Output:
	// 0.1 500ms 7
	// 0 faults before any request
	// invalid fault spec: slowdown+internal+reset+truncate must be at most 1, got 1.2
}
