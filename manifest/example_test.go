package manifest_test

import (
	"fmt"

	"github.com/durashuffle/durashuffle/manifest"
)

// A bucket's keys follow the layout: an operator scopes a lifecycle rule
// or a credential to a query's or a stage's prefix, and finds one
// attempt's data objects (without key spread) under its own.
func ExampleLayout() {
	l := manifest.Layout{Prefix: "shuffle"}
	fmt.Println(l.QueryPrefix("q1"))
	fmt.Println(l.StagePrefix("q1", 0))
	fmt.Println(l.AttemptPrefix("q1", 0, "7", "a1"))
	fmt.Println(l.WorkerManifestKey("q1", 0, "7"))
	fmt.Println(l.StageManifestKey("q1", 0))
	// Output:
	// shuffle/q1/
	// shuffle/q1/stage-0/
	// shuffle/q1/stage-0/worker-7/attempt-a1/
	// shuffle/q1/stage-0/worker-7/manifest.json
	// shuffle/q1/stage-0/manifest.json
}
