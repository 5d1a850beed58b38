package uploader_test

import (
	"fmt"

	"github.com/durashuffle/durashuffle/uploader"
)

// A spilled writer's object is uploaded from its file in parts sized by
// the object, not by the chunk size: about one part per connection, a
// small first part whose answer measures a connection's rate, and none
// over MaxPartSize. PlanFileParts says how an object is cut, and so what
// its PUT-class requests cost.
func ExamplePlanFileParts() {
	cfg := uploader.Config{ChunkSize: 8 << 20, Concurrency: 8}
	for _, size := range []int64{1 << 30, 64 << 30} {
		parts, first, least, most, err := uploader.PlanFileParts(cfg, "data-0.arrows", size)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%d GiB: %d parts, the first %d MiB, each %d to %d MiB\n", size>>30, parts, first>>20, least>>20, most>>20)
	}
	// Output:
	// 1 GiB: 9 parts, the first 5 MiB, each 5 to 512 MiB
	// 64 GiB: 129 parts, the first 5 MiB, each 5 to 512 MiB
}
