package combine_test

import (
	"fmt"

	"github.com/durashuffle/durashuffle/combine"
)

// MakePlan prices combining a stage before anything is read: here 500
// writers of one 256 MiB object each, over 500 partitions of equal
// bytes, read by as many readers. What the sizes come from in a real stage is
// its sealed index (Stage.Plan).
func ExampleMakePlan() {
	const workers, partitions = 500, 500
	const objectBytes = 256 << 20
	in := combine.Input{Query: "q", Partitions: partitions, IndexKey: "index-1.bin", PartitionBytes: make([]int64, partitions)}
	for p := range partitions {
		in.PartitionBytes[p] = workers * objectBytes / partitions
	}
	for w := range workers {
		in.Workers = append(in.Workers, combine.WorkerInput{ID: fmt.Sprint(w), Objects: []int64{objectBytes}})
	}
	p, err := combine.MakePlan(in, combine.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	pr := p.Predict
	s3, err := combine.PricesOf("s3") // the predictions are S3's; Plan.PredictOn prices another store's
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d groups x %d buckets = %d tasks\n", len(p.Groups), len(p.Buckets), p.Tasks())
	fmt.Printf("direct:   %d GETs, $%.2f\n", pr.Direct.GET, s3.Dollars(pr.Direct))
	fmt.Printf("combined: %d GETs and %d PUTs to combine, %d GETs to read, $%.2f\n",
		pr.Combine.GET, pr.Combine.PUT, pr.Combined.GET, s3.Dollars(pr.Combine)+s3.Dollars(pr.Combined))
	fmt.Println("pays:", pr.Pays)
	// Output:
	// 16 groups x 17 buckets = 272 tasks
	// direct:   251000 GETs, $0.10
	// combined: 9592 GETs and 1909 PUTs to combine, 9000 GETs to read, $0.02
	// pays: true
}
