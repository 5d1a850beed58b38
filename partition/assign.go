package partition

import (
	"fmt"
	"math"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// keyBuffers are the key vectors Assign computes into, reused from call
// to call.
var keyBuffers = sync.Pool{New: func() any { return new([]uint64) }}

// Assign returns the partition of each row of key among count
// partitions: element i is row i's, in [0, count). It reuses dst's
// storage when it holds len(key) values. Equal values get equal
// partitions whatever their encoding (plain or dictionary, view or not,
// large or not, any integer, float or decimal width, any time unit);
// nulls all go to the partition of the integer 0. A key of a type with
// no partitioning key (nested types and the null type) is refused with
// an error naming the type. Assign only reads key and is safe for
// concurrent use.
func Assign(key arrow.Array, count int, dst []int32) ([]int32, error) {
	if count < 1 || count > math.MaxInt32 {
		return nil, fmt.Errorf("partition count must be between 1 and %d, got %d", math.MaxInt32, count)
	}
	n := key.Len()
	kb := keyBuffers.Get().(*[]uint64)
	defer keyBuffers.Put(kb)
	if cap(*kb) < n {
		*kb = make([]uint64, n)
	}
	keys := (*kb)[:n]
	if err := columnKeys(key, keys); err != nil {
		return nil, err
	}
	if cap(dst) < n {
		dst = make([]int32, n)
	}
	dst = dst[:n]
	for i, k := range keys {
		dst[i] = int32(partitionOf(k, count))
	}
	return dst, nil
}

// OfInt64 is the partition of the integer v among count partitions
// (count at least 1): the partition Assign gives a row whose key is v in
// a column of any integer, float or decimal type.
func OfInt64(v int64, count int) int { return partitionOf(uint64(v), count) }

// CheckKeyType refuses a key type that has no partitioning key, with the
// error Assign would give a column of it, so that a program can refuse a
// key column before it reads any batch. A type Arrow cannot make an
// empty array of is left to Assign.
func CheckKeyType(dt arrow.DataType) (err error) {
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	empty := array.MakeArrayOfNull(memory.DefaultAllocator, dt, 0)
	defer empty.Release()
	return columnKeys(empty, nil)
}
