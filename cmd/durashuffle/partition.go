package main

import (
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/durashuffle/durashuffle/partition"
)

// keyColumn resolves --partition-by to the index of its column in
// schema, refusing, before any batch is read, a name the schema does not
// hold once and a column of a type with no partitioning key. -1: no key
// (one partition, no --partition-by).
func keyColumn(schema *arrow.Schema, column string, partitions int) (int, error) {
	if partitions == 1 && column == "" {
		return -1, nil
	}
	idx := schema.FieldIndices(column)
	switch len(idx) {
	case 0:
		names := make([]string, 0, schema.NumFields())
		for _, f := range schema.Fields() {
			names = append(names, f.Name)
		}
		return 0, usagef("--partition-by %q: no such column; the input has %q", column, names)
	case 1:
	default:
		return 0, usagef("--partition-by %q: the input has %d columns of that name", column, len(idx))
	}
	if err := partition.CheckKeyType(schema.Field(idx[0]).Type); err != nil {
		return 0, usagef("--partition-by %s: %v", column, err)
	}
	return idx[0], nil
}
