package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
)

// The partitioning key of a value is a 64-bit integer; its partition is
// partitionOf(key, partitions). docs/partitioning.md states the
// algorithm byte by byte and TestPartitionVectors pins it: changing any of
// this moves rows of a stage written by an older durashuffle to other
// partitions than a newer one's.
//
// The rule is "same logical value, same key, whatever the physical type":
//   - a number (any integer, float or decimal type) that is an integer in
//     [-2^63, 2^63) is its own key, as the demo's l_orderkey is; -0.0 is 0;
//   - any other number is FNV-1a 64 of its exact value in lowest terms, so
//     int 5, float 5.0 and decimal 5.00 share a key, as do 0.5 (float) and
//     0.50 (decimal); every NaN is one NaN;
//   - strings, binaries and fixed-size binaries of every width and view are
//     FNV-1a 64 of their bytes;
//   - dates, times, timestamps and durations are FNV-1a 64 of their count
//     of nanoseconds (as a 128-bit integer, so no unit overflows), tagged by
//     kind; a timestamp's time zone is not part of it;
//   - intervals are FNV-1a 64 of (months, days, nanoseconds);
//   - booleans are FNV-1a 64 of one byte;
//   - dictionaries and run-end encoded columns by their values, extension
//     types by their storage;
//   - null is key 0.

// Tags: the first byte hashed for each kind of value that is not its own
// key, so equal bytes of different kinds hash apart.
const (
	tagNumber    = 0x01
	tagPosInf    = 0x02
	tagNegInf    = 0x03
	tagNaN       = 0x04
	tagBool      = 0x05
	tagBytes     = 0x06
	tagDate      = 0x07
	tagTime      = 0x08
	tagTimestamp = 0x09
	tagDuration  = 0x0A
	tagInterval  = 0x0B
)

// FNV-1a 64 (hash/fnv's New64a), inlined so hashing a value allocates
// nothing.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

func fnvBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return h
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

// fnvUint64 hashes v as 8 big-endian bytes.
func fnvUint64(h, v uint64) uint64 {
	for s := 56; s >= 0; s -= 8 {
		h = (h ^ (v >> uint(s) & 0xFF)) * fnvPrime
	}
	return h
}

var (
	keyNaN    = fnvByte(fnvOffset, tagNaN)
	keyPosInf = fnvByte(fnvOffset, tagPosInf)
	keyNegInf = fnvByte(fnvOffset, tagNegInf)
	keyFalse  = fnvByte(fnvByte(fnvOffset, tagBool), 0)
	keyTrue   = fnvByte(fnvByte(fnvOffset, tagBool), 1)
)

// numKey is the key of the number ±mag·2^a·5^b.
func numKey(neg bool, mag uint64, a, b int64) uint64 {
	if mag == 0 {
		return 0
	}
	tz := bits.TrailingZeros64(mag)
	mag >>= uint(tz)
	a += int64(tz)
	for mag%5 == 0 {
		mag /= 5
		b++
	}
	if v, ok := intValue(mag, a, b); ok {
		if !neg && v <= math.MaxInt64 {
			return v
		}
		if neg && v <= 1<<63 {
			return -v
		}
	}
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], mag)
	i := 0
	for buf[i] == 0 {
		i++
	}
	return numBytesKey(neg, buf[i:], a, b)
}

// intValue is mag·2^a·5^b when that is an integer below 2^64.
func intValue(mag uint64, a, b int64) (uint64, bool) {
	if a < 0 || b < 0 || a > 63 || b > 27 {
		return 0, false
	}
	for range b {
		hi, lo := bits.Mul64(mag, 5)
		if hi != 0 {
			return 0, false
		}
		mag = lo
	}
	if mag > math.MaxUint64>>uint(a) {
		return 0, false
	}
	return mag << uint(a), true
}

// numBytesKey hashes ±n·2^a·5^b, n odd, not a multiple of 5 and given as
// its minimal big-endian bytes: tag, sign, len(n), n, a, b.
func numBytesKey(neg bool, n []byte, a, b int64) uint64 {
	h := fnvByte(fnvOffset, tagNumber)
	if neg {
		h = fnvByte(h, 1)
	} else {
		h = fnvByte(h, 0)
	}
	h = fnvByte(h, byte(len(n)))
	h = fnvBytes(h, n)
	h = fnvUint64(h, uint64(a))
	return fnvUint64(h, uint64(b))
}

// bigNumKey is the key of ±mag·2^a·5^b; mag is consumed.
func bigNumKey(neg bool, mag *big.Int, a, b int64) uint64 {
	if mag.Sign() == 0 {
		return 0
	}
	if mag.IsUint64() {
		return numKey(neg, mag.Uint64(), a, b)
	}
	tz := mag.TrailingZeroBits()
	mag.Rsh(mag, tz)
	a += int64(tz)
	five, q, r := big.NewInt(5), new(big.Int), new(big.Int)
	for {
		q.QuoRem(mag, five, r)
		if r.Sign() != 0 {
			break
		}
		mag.Set(q)
		b++
	}
	if mag.IsUint64() {
		return numKey(neg, mag.Uint64(), a, b)
	}
	return numBytesKey(neg, mag.Bytes(), a, b)
}

func intKey(v int64) uint64 { return uint64(v) }

func uintKey(v uint64) uint64 {
	if v <= math.MaxInt64 {
		return v
	}
	return numKey(false, v, 0, 0)
}

func floatKey(f float64) uint64 {
	switch {
	case f != f:
		return keyNaN
	case f == 0:
		return 0 // and -0.0
	case f >= -(1<<63) && f < 1<<63 && f == math.Trunc(f):
		return uint64(int64(f))
	case math.IsInf(f, 1):
		return keyPosInf
	case math.IsInf(f, -1):
		return keyNegInf
	}
	b := math.Float64bits(f)
	exp, m := int64(b>>52&0x7FF), b&(1<<52-1)
	e := int64(-1074)
	if exp != 0 {
		m |= 1 << 52
		e = exp - 1075
	}
	return numKey(b>>63 == 1, m, e, 0)
}

// decimalKey is the key of u·10^-scale.
func decimalKey(u int64, scale int32) uint64 {
	if scale == 0 {
		return uint64(u)
	}
	mag := uint64(u)
	if u < 0 {
		mag = -mag
	}
	return numKey(u < 0, mag, -int64(scale), -int64(scale))
}

func decimal128Key(n decimal128.Num, scale int32) uint64 {
	hi, lo := n.HighBits(), n.LowBits()
	if hi == 0 && lo <= math.MaxInt64 || hi == -1 && lo > math.MaxInt64 {
		return decimalKey(int64(lo), scale)
	}
	return bigNumKey(n.Sign() < 0, n.Abs().BigInt(), -int64(scale), -int64(scale))
}

func decimal256Key(n decimal256.Num, scale int32) uint64 {
	w := n.Array()
	if w[3] == 0 && w[2] == 0 && w[1] == 0 && w[0] <= math.MaxInt64 ||
		w[3] == math.MaxUint64 && w[2] == math.MaxUint64 && w[1] == math.MaxUint64 && w[0] > math.MaxInt64 {
		return decimalKey(int64(w[0]), scale)
	}
	return bigNumKey(n.Sign() < 0, n.Abs().BigInt(), -int64(scale), -int64(scale))
}

// nanosPer is the number of nanoseconds in one unit.
func nanosPer(u arrow.TimeUnit) uint64 {
	switch u {
	case arrow.Second:
		return 1e9
	case arrow.Millisecond:
		return 1e6
	case arrow.Microsecond:
		return 1e3
	}
	return 1
}

// temporalKey hashes tag and v·mult nanoseconds as a 16-byte big-endian
// two's complement integer.
func temporalKey(tag byte, v int64, mult uint64) uint64 {
	mag := uint64(v)
	if v < 0 {
		mag = -mag
	}
	hi, lo := bits.Mul64(mag, mult)
	if v < 0 {
		lo = ^lo + 1
		hi = ^hi
		if lo == 0 {
			hi++
		}
	}
	return fnvUint64(fnvUint64(fnvByte(fnvOffset, tag), hi), lo)
}

func intervalKey(months, days int32, nanos int64) uint64 {
	h := fnvByte(fnvOffset, tagInterval)
	h = fnvUint64(h, uint64(uint32(months))<<32|uint64(uint32(days)))
	return fnvUint64(h, uint64(nanos))
}

func bytesKey(b []byte) uint64  { return fnvBytes(fnvByte(fnvOffset, tagBytes), b) }
func stringKey(s string) uint64 { return fnvString(fnvByte(fnvOffset, tagBytes), s) }

// partitionOf is the partition of a key among partitions: SplitMix64's
// finalizer of the key XOR a constant, modulo the count, so consecutive
// integer keys spread evenly.
func partitionOf(key uint64, partitions int) int {
	return int(mix64(key^0x5851F42D4C957F2D) % uint64(partitions))
}

// mix64 is SplitMix64's finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// noKeyError is a type that has no partitioning key: nested types
// (list, struct, map, union) and the null type.
type noKeyError struct{ dt arrow.DataType }

func (e noKeyError) Error() string {
	return fmt.Sprintf("values of type %s have no partitioning key", e.dt)
}

// keyTypes is what a user may partition by, for error messages.
const keyTypes = "nested and null types have no partitioning key; want a number (integer, float, decimal), date, time, timestamp, duration, interval, boolean, string or binary column " +
	"(plain, large, view, fixed-size, dictionary, run-end encoded or an extension of one)"

// columnKeys sets keys[i] to the partitioning key of row i of col, for
// every row; a column whose type has no key is refused with an error
// naming that type.
func columnKeys(col arrow.Array, keys []uint64) error {
	if err := fillKeys(col, keys[:col.Len()]); err != nil {
		var nk noKeyError
		switch {
		case !errors.As(err, &nk):
			return err
		case arrow.TypeEqual(nk.dt, col.DataType()):
			return fmt.Errorf("cannot partition by a column of type %s: %s", col.DataType(), keyTypes)
		}
		return fmt.Errorf("cannot partition by a column of type %s (%w): %s", col.DataType(), err, keyTypes)
	}
	return nil
}

// fillKeys sets keys[i] to the key of row i of col (0 for a null), or
// fails with a noKeyError naming the type that has no key.
func fillKeys(col arrow.Array, keys []uint64) error {
	n := col.Len()
	if !numberKeys(col, keys) && !temporalKeys(col, keys) && !textKeys(col, keys) {
		switch a := col.(type) {
		case *array.Dictionary:
			// By value, not by index: dictionaries differ from batch to
			// batch and from writer to writer.
			dict := a.Dictionary()
			dk := make([]uint64, dict.Len())
			if err := fillKeys(dict, dk); err != nil {
				return err
			}
			for i := range n {
				if a.IsValid(i) {
					keys[i] = dk[a.GetValueIndex(i)]
				}
			}
		case *array.RunEndEncoded:
			return reeKeys(a, keys)
		case array.ExtensionArray:
			return fillKeys(a.Storage(), keys)
		default:
			return noKeyError{col.DataType()}
		}
	}
	if col.NullN() > 0 {
		for i := range n {
			if col.IsNull(i) {
				keys[i] = 0
			}
		}
	}
	return nil
}

// numberKeys sets the keys of an integer, float or decimal column; false: col is not one of them.
func numberKeys(col arrow.Array, keys []uint64) bool {
	n := col.Len()
	switch a := col.(type) {
	case *array.Int8:
		for i := range n {
			keys[i] = intKey(int64(a.Value(i)))
		}
	case *array.Int16:
		for i := range n {
			keys[i] = intKey(int64(a.Value(i)))
		}
	case *array.Int32:
		for i := range n {
			keys[i] = intKey(int64(a.Value(i)))
		}
	case *array.Int64:
		for i, v := range a.Int64Values() {
			keys[i] = intKey(v)
		}
	case *array.Uint8:
		for i := range n {
			keys[i] = uint64(a.Value(i))
		}
	case *array.Uint16:
		for i := range n {
			keys[i] = uint64(a.Value(i))
		}
	case *array.Uint32:
		for i := range n {
			keys[i] = uint64(a.Value(i))
		}
	case *array.Uint64:
		for i := range n {
			keys[i] = uintKey(a.Value(i))
		}
	case *array.Float16:
		for i := range n {
			keys[i] = floatKey(float64(a.Value(i).Float32()))
		}
	case *array.Float32:
		for i := range n {
			keys[i] = floatKey(float64(a.Value(i)))
		}
	case *array.Float64:
		for i := range n {
			keys[i] = floatKey(a.Value(i))
		}
	case *array.Decimal32:
		s := a.DataType().(arrow.DecimalType).GetScale()
		for i := range n {
			keys[i] = decimalKey(int64(a.Value(i)), s)
		}
	case *array.Decimal64:
		s := a.DataType().(arrow.DecimalType).GetScale()
		for i := range n {
			keys[i] = decimalKey(int64(a.Value(i)), s)
		}
	case *array.Decimal128:
		s := a.DataType().(arrow.DecimalType).GetScale()
		for i := range n {
			keys[i] = decimal128Key(a.Value(i), s)
		}
	case *array.Decimal256:
		s := a.DataType().(arrow.DecimalType).GetScale()
		for i := range n {
			keys[i] = decimal256Key(a.Value(i), s)
		}
	default:
		return false
	}
	return true
}

// temporalKeys sets the keys of a date, time, timestamp, duration or interval column; false: col is not one of them.
func temporalKeys(col arrow.Array, keys []uint64) bool {
	n := col.Len()
	switch a := col.(type) {
	case *array.Date32:
		for i := range n {
			keys[i] = temporalKey(tagDate, int64(a.Value(i)), 86400e9)
		}
	case *array.Date64:
		for i := range n {
			keys[i] = temporalKey(tagDate, int64(a.Value(i)), 1e6)
		}
	case *array.Time32:
		m := nanosPer(a.DataType().(*arrow.Time32Type).Unit)
		for i := range n {
			keys[i] = temporalKey(tagTime, int64(a.Value(i)), m)
		}
	case *array.Time64:
		m := nanosPer(a.DataType().(*arrow.Time64Type).Unit)
		for i := range n {
			keys[i] = temporalKey(tagTime, int64(a.Value(i)), m)
		}
	case *array.Timestamp:
		m := nanosPer(a.DataType().(*arrow.TimestampType).Unit)
		for i := range n {
			keys[i] = temporalKey(tagTimestamp, int64(a.Value(i)), m)
		}
	case *array.Duration:
		m := nanosPer(a.DataType().(*arrow.DurationType).Unit)
		for i := range n {
			keys[i] = temporalKey(tagDuration, int64(a.Value(i)), m)
		}
	case *array.MonthInterval:
		for i := range n {
			keys[i] = intervalKey(int32(a.Value(i)), 0, 0)
		}
	case *array.DayTimeInterval:
		for i := range n {
			v := a.Value(i)
			keys[i] = intervalKey(0, v.Days, int64(v.Milliseconds)*1e6)
		}
	case *array.MonthDayNanoInterval:
		for i := range n {
			v := a.Value(i)
			keys[i] = intervalKey(v.Months, v.Days, v.Nanoseconds)
		}
	default:
		return false
	}
	return true
}

// textKeys sets the keys of a boolean, string or binary column; false: col is not one of them.
func textKeys(col arrow.Array, keys []uint64) bool {
	n := col.Len()
	switch a := col.(type) {
	case *array.Boolean:
		for i := range n {
			if a.Value(i) {
				keys[i] = keyTrue
			} else {
				keys[i] = keyFalse
			}
		}
	case *array.String:
		for i := range n {
			keys[i] = stringKey(a.Value(i))
		}
	case *array.LargeString:
		for i := range n {
			keys[i] = stringKey(a.Value(i))
		}
	case *array.StringView:
		for i := range n {
			keys[i] = stringKey(a.Value(i))
		}
	case *array.Binary:
		for i := range n {
			keys[i] = bytesKey(a.Value(i))
		}
	case *array.LargeBinary:
		for i := range n {
			keys[i] = bytesKey(a.Value(i))
		}
	case *array.BinaryView:
		for i := range n {
			keys[i] = bytesKey(a.Value(i))
		}
	case *array.FixedSizeBinary:
		for i := range n {
			keys[i] = bytesKey(a.Value(i))
		}
	default:
		return false
	}
	return true
}

// reeKeys fills the keys of a run-end encoded column from the keys of the
// values its rows are in.
func reeKeys(a *array.RunEndEncoded, keys []uint64) error {
	n := a.Len()
	if n == 0 { // no rows, but a type to check
		return fillKeys(a.Values(), make([]uint64, a.Values().Len()))
	}
	off, plen := a.GetPhysicalOffset(), a.GetPhysicalLength()
	values := array.NewSlice(a.Values(), int64(off), int64(off+plen))
	defer values.Release()
	vk := make([]uint64, plen)
	if err := fillKeys(values, vk); err != nil {
		return err
	}
	var end func(j int) int
	switch e := a.RunEndsArr().(type) {
	case *array.Int16:
		end = func(j int) int { return int(e.Value(j)) }
	case *array.Int32:
		end = func(j int) int { return int(e.Value(j)) }
	case *array.Int64:
		end = func(j int) int { return int(e.Value(j)) }
	default:
		return fmt.Errorf("run ends of type %s: want int16, int32 or int64", e.DataType())
	}
	first := a.Data().Offset()
	i := 0
	for j := range plen {
		e := min(end(off+j)-first, n)
		for ; i < e; i++ {
			keys[i] = vk[j]
		}
	}
	return nil
}
