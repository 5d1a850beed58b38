package uploader_test

import (
	"fmt"

	"github.com/durashuffle/durashuffle/uploader"
)

// A spilled writer's object is uploaded from its file in parts sized by
// the object, not by the chunk size: alone in its pool, about one part
// per connection, a small first part whose answer measures a
// connection's rate, and none over MaxPartSize; sharing the pool with
// other objects from disk, fewer and larger parts, the connections being
// busy anyway. PlanFileParts says how an object is cut, and so what its
// PUT-class requests cost.
func ExamplePlanFileParts() {
	cfg := uploader.Config{ChunkSize: 8 << 20, Concurrency: 8}
	for _, sharing := range []int{1, 8} {
		for _, size := range []int64{1 << 30, 64 << 30} {
			parts, first, least, most, err := uploader.PlanFileParts(cfg, "data-0.arrows", size, sharing)
			if err != nil {
				fmt.Println(err)
				continue
			}
			fmt.Printf("%d GiB, %d at once: %d parts, the first %d MiB, each %d to %d MiB\n", size>>30, sharing, parts, first>>20, least>>20, most>>20)
		}
	}
	// Output:
	// 1 GiB, 1 at once: 9 parts, the first 5 MiB, each 5 to 2048 MiB
	// 64 GiB, 1 at once: 33 parts, the first 5 MiB, each 5 to 2048 MiB
	// 1 GiB, 8 at once: 1 parts, the first 0 MiB, each 5 to 2048 MiB
	// 64 GiB, 8 at once: 32 parts, the first 0 MiB, each 5 to 2048 MiB
}
