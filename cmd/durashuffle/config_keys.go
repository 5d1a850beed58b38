package main

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/durashuffle/durashuffle"
)

// Key is one configuration key as the command line shows it: its name in
// the file, the environment and the flags, its doc and type, and its
// field in durashuffle.Config (a group's field: Write.ChunkSize).
type Key struct {
	Name  string // yaml key, e.g. chunk_size
	Go    string // Config's field, e.g. Write.ChunkSize
	Env   string // DURASHUFFLE_CHUNK_SIZE
	Flag  string // chunk-size
	Doc   string
	Type  string
	index []int // for reflect.Value.FieldByIndex: the group, then the field
}

// Keys lists every configuration key in struct order: Config's groups,
// each group's fields; a field's yaml tag is its key, its doc tag what
// docs/configuration.md and the flag's usage say of it.
func Keys() []Key {
	t := reflect.TypeFor[durashuffle.Config]()
	var ks []Key
	for i := range t.NumField() {
		g := t.Field(i)
		for j := range g.Type.NumField() {
			f := g.Type.Field(j)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			typ := f.Type.Name()
			switch f.Type {
			case reflect.TypeFor[durashuffle.Size]():
				typ = "size"
			case reflect.TypeFor[durashuffle.Duration]():
				typ = "duration"
			case reflect.TypeFor[durashuffle.MemoryLimit]():
				typ = "size, auto or off"
			}
			ks = append(ks, Key{
				Name:  name,
				Go:    g.Name + "." + f.Name,
				Env:   "DURASHUFFLE_" + strings.ToUpper(name),
				Flag:  strings.ReplaceAll(name, "_", "-"),
				Doc:   f.Tag.Get("doc"),
				Type:  typ,
				index: []int{i, j},
			})
		}
	}
	return ks
}

// field is k's field in c, settable.
func (k Key) field(c *durashuffle.Config) reflect.Value {
	return reflect.ValueOf(c).Elem().FieldByIndex(k.index)
}

// Value returns k's value in c as text, as the docs print defaults.
func (k Key) Value(c *durashuffle.Config) string {
	return fmt.Sprint(k.field(c).Interface())
}

// textFlag makes a pflag.Value of a configuration type that parses
// itself (durashuffle.Size, Duration, MemoryLimit): the library parses
// text for the file and the environment, the command line adds the flag.
type textFlag struct {
	v   textValue
	typ string
}

// textValue is what textFlag needs of a type: parse and print itself.
type textValue interface {
	UnmarshalText([]byte) error
	String() string
}

func (f textFlag) Set(s string) error { return f.v.UnmarshalText([]byte(s)) }
func (f textFlag) String() string     { return f.v.String() }
func (f textFlag) Type() string       { return f.typ }

// sizeFlag is a flag of a size such as 8MiB.
func sizeFlag(p *durashuffle.Size) textFlag { return textFlag{p, "size"} }
