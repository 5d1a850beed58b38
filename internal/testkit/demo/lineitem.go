package demo

import (
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/durashuffle/durashuffle/partition"
)

// Row is one lineitem row, as generated and as decoded back.
type Row struct {
	OrderKey      int64
	PartKey       int64
	SuppKey       int32
	LineNumber    int32
	Quantity      float64
	ExtendedPrice float64
	Discount      float64
	Tax           float64
	ReturnFlag    string
	LineStatus    string
	ShipDate      arrow.Date32
	CommitDate    arrow.Date32
	ReceiptDate   arrow.Date32
	ShipInstruct  string
	ShipMode      string
	Comment       string
}

// Column names, in schema order.
const (
	ColOrderKey      = "l_orderkey"
	ColPartKey       = "l_partkey"
	ColSuppKey       = "l_suppkey"
	ColLineNumber    = "l_linenumber"
	ColQuantity      = "l_quantity"
	ColExtendedPrice = "l_extendedprice"
	ColDiscount      = "l_discount"
	ColTax           = "l_tax"
	ColReturnFlag    = "l_returnflag"
	ColLineStatus    = "l_linestatus"
	ColShipDate      = "l_shipdate"
	ColCommitDate    = "l_commitdate"
	ColReceiptDate   = "l_receiptdate"
	ColShipInstruct  = "l_shipinstruct"
	ColShipMode      = "l_shipmode"
	ColComment       = "l_comment"
)

var schema = arrow.NewSchema([]arrow.Field{
	{Name: ColOrderKey, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColPartKey, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColSuppKey, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColLineNumber, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColQuantity, Type: arrow.PrimitiveTypes.Float64},
	{Name: ColExtendedPrice, Type: arrow.PrimitiveTypes.Float64},
	{Name: ColDiscount, Type: arrow.PrimitiveTypes.Float64},
	{Name: ColTax, Type: arrow.PrimitiveTypes.Float64},
	{Name: ColReturnFlag, Type: arrow.BinaryTypes.String},
	{Name: ColLineStatus, Type: arrow.BinaryTypes.String},
	{Name: ColShipDate, Type: arrow.FixedWidthTypes.Date32},
	{Name: ColCommitDate, Type: arrow.FixedWidthTypes.Date32},
	{Name: ColReceiptDate, Type: arrow.FixedWidthTypes.Date32},
	{Name: ColShipInstruct, Type: arrow.BinaryTypes.String},
	{Name: ColShipMode, Type: arrow.BinaryTypes.String},
	{Name: ColComment, Type: arrow.BinaryTypes.String},
}, nil)

// Schema is the lineitem schema: integers, floats, dates, short and long
// strings, none nullable in practice.
func Schema() *arrow.Schema { return schema }

// LinesPerOrder is how many consecutive rows share an order key: an
// order's lines land in one partition, as in a shuffle by order key.
const LinesPerOrder = 4

var (
	startDate   = days(1992, 1, 1)
	orderDays   = days(1998, 8, 2) - startDate // orders end 151 days before 1998-12-31
	currentDate = days(1995, 6, 17)
)

func days(y int, m time.Month, d int) arrow.Date32 {
	return arrow.Date32FromTime(time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
}

var (
	shipModes     = []string{"REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"}
	shipInstructs = []string{"DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"}
	// words are TPC-H's text grammar vocabulary, in part.
	words = []string{
		"furiously", "sly", "careful", "blithely", "quickly", "fluffily", "slyly", "ironic",
		"final", "regular", "express", "pending", "bold", "even", "special", "silent",
		"unusual", "daring", "packages", "requests", "accounts", "deposits", "foxes", "ideas",
		"theodolites", "pinto", "beans", "instructions", "dependencies", "excuses", "platelets",
		"asymptotes", "courts", "dolphins", "multipliers", "sauternes", "warthogs", "frets",
		"dinos", "attainments", "somas", "tithes", "sheaves", "realms", "hockey", "players",
		"sleep", "wake", "are", "haggle", "nag", "use", "boost", "affix", "detect", "integrate",
		"cajole", "impress", "doze", "among", "above", "about", "after", "against", "along",
		"across", "according", "to", "the", "carefully", "thinly", "closely", "slowly",
	}
)

// Generator makes the rows of one data set. Row i depends only on Seed
// and i, so any worker can generate any range and a reader can check it.
type Generator struct {
	Seed uint64
}

// rng is splitmix64: tiny, fast and good enough for test data.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	return mix64(r.s)
}

// intn returns a value in [0, n).
func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// between returns a value in [lo, hi].
func (r *rng) between(lo, hi int) int { return lo + r.intn(hi-lo+1) }

func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// OrderKey is the order key of row i: TPC-H's sparse keys (8 used out of
// every 32), LinesPerOrder lines each.
func OrderKey(i int64) int64 {
	o := i / LinesPerOrder
	return (o/8)*32 + o%8 + 1
}

// Row fills r with row i. r's strings are fresh; r may be reused.
func (g Generator) Row(i int64, r *Row) {
	r.OrderKey = OrderKey(i)
	r.LineNumber = int32(i%LinesPerOrder) + 1

	// Order-level values come from the order key, line-level from i.
	ord := rng{s: mix64(g.Seed ^ mix64(uint64(r.OrderKey)))}
	orderDate := startDate + arrow.Date32(ord.intn(int(orderDays)+1))

	x := rng{s: mix64(g.Seed+0x632BE59BD9B4E019) ^ mix64(uint64(i)^0xA0761D6478BD642F)}
	r.PartKey = int64(x.between(1, 200_000))
	r.SuppKey = int32(x.between(1, 10_000))
	qty := x.between(1, 50)
	r.Quantity = float64(qty)
	// TPC-H's retail price of a part, in cents.
	price := 90_000 + (r.PartKey/10)%20_001 + 100*(r.PartKey%1_000)
	r.ExtendedPrice = float64(int64(qty)*price) / 100
	r.Discount = float64(x.between(0, 10)) / 100
	r.Tax = float64(x.between(0, 8)) / 100
	r.ShipDate = orderDate + arrow.Date32(x.between(1, 121))
	r.CommitDate = orderDate + arrow.Date32(x.between(30, 90))
	r.ReceiptDate = r.ShipDate + arrow.Date32(x.between(1, 30))
	switch {
	case r.ReceiptDate > currentDate:
		r.ReturnFlag = "N"
	case x.intn(2) == 0:
		r.ReturnFlag = "R"
	default:
		r.ReturnFlag = "A"
	}
	if r.ShipDate > currentDate {
		r.LineStatus = "O"
	} else {
		r.LineStatus = "F"
	}
	r.ShipInstruct = shipInstructs[x.intn(len(shipInstructs))]
	r.ShipMode = shipModes[x.intn(len(shipModes))]
	r.Comment = comment(&x)
}

// comment is 40 to 100 characters of TPC-H-like text.
func comment(x *rng) string {
	n := x.between(40, 100)
	var buf [128]byte // longest word + 100: stays on the stack
	b := buf[:0]
	for len(b) < n {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, words[x.intn(len(words))]...)
	}
	return string(b[:n])
}

// PartitionOf is the partition of an order key among partitions: package
// partition's, so that a Writer's WriteKeyed by l_orderkey puts each row
// where the demo expects it.
func PartitionOf(orderKey int64, partitions int) int {
	return partition.OfInt64(orderKey, partitions)
}

// Range is a half-open range of row numbers.
type Range struct{ Lo, Hi int64 }

// Len is the number of rows in r.
func (r Range) Len() int64 { return r.Hi - r.Lo }

// Ranges splits rows into n contiguous ranges whose sizes differ by at
// most one: worker w generates Ranges(rows, n)[w].
func Ranges(rows int64, n int) []Range {
	out := make([]Range, n)
	for w := range out {
		out[w] = Range{rows * int64(w) / int64(n), rows * int64(w+1) / int64(n)}
	}
	return out
}
