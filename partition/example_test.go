package partition_test

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/partition"
)

// Each row goes to the partition of its key: the same value in the same
// partition however it is encoded, here as utf8 and as a dictionary.
func ExampleAssign() {
	plain, _, _ := array.FromJSON(memory.DefaultAllocator, arrow.BinaryTypes.String,
		strings.NewReader(`["apple", "pear", "apple", null]`))
	defer plain.Release()
	b := array.NewDictionaryBuilder(memory.DefaultAllocator, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String})
	defer b.Release()
	for _, v := range []string{"pear", "apple"} {
		_ = b.(*array.BinaryDictionaryBuilder).AppendString(v)
	}
	dict := b.NewArray()
	defer dict.Release()

	p1, err := partition.Assign(plain, 16, nil)
	if err != nil {
		panic(err)
	}
	p2, err := partition.Assign(dict, 16, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(p1, p2)
	fmt.Println(partition.OfInt64(0, 16) == int(p1[3])) // nulls go where 0 goes
	fmt.Println(partition.CheckKeyType(arrow.ListOf(arrow.PrimitiveTypes.Int32)) != nil)
	// Output:
	// [13 12 13 5] [12 13]
	// true
	// true
}

// Split hands each partition its rows, in input order.
func ExampleSplit() {
	ids, _, _ := array.FromJSON(memory.DefaultAllocator, arrow.PrimitiveTypes.Int64, strings.NewReader(`[10, 11, 12, 13, 14]`))
	defer ids.Release()
	rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "id", Type: ids.DataType()}}, nil), []arrow.Array{ids}, 5)
	defer rec.Release()
	parts, err := partition.Split(rec, []int32{2, 0, 2, 1, 0}, 4, nil)
	if err != nil {
		panic(err)
	}
	for p, r := range parts {
		if r == nil {
			fmt.Printf("partition %d: no rows\n", p)
			continue
		}
		fmt.Printf("partition %d: %v\n", p, r.Column(0))
		r.Release()
	}
	// Output:
	// partition 0: [11 14]
	// partition 1: [13]
	// partition 2: [10 12]
	// partition 3: no rows
}
