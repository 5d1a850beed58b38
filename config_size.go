package durashuffle

import (
	"fmt"
	"strconv"
	"strings"
)

// Size is a byte count that parses and prints with binary units
// ("5MiB", "1GiB", "512KiB", "1048576").
type Size int64

// Units, binary.
const (
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
)

// tib is the largest unit sizes parse and print with; no setting is that
// large.
const tib Size = 1 << 40

var units = []struct {
	suffix string
	mult   Size
}{
	{"tib", tib}, {"gib", GiB}, {"mib", MiB}, {"kib", KiB},
	{"tb", 1000 * 1000 * 1000 * 1000}, {"gb", 1000 * 1000 * 1000}, {"mb", 1000 * 1000}, {"kb", 1000},
	{"t", tib}, {"g", GiB}, {"m", MiB}, {"k", KiB}, {"b", 1},
}

// ParseSize reads a size such as "8MiB", "5 MiB", "1.5GiB", "100MB" or a
// plain byte count.
func ParseSize(s string) (Size, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return 0, fmt.Errorf("size %q: empty", s)
	}
	mult := Size(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n < 0 || (n > 0 && n > int64(1<<62)/int64(mult)) {
			return 0, fmt.Errorf("size %q: out of range", s)
		}
		return Size(n) * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mult) > float64(int64(1)<<62) {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (KiB, MiB, GiB)", s)
	}
	return Size(f * float64(mult)), nil
}

// String prints the size in the largest binary unit that divides it.
func (s Size) String() string {
	for _, u := range []struct {
		suffix string
		mult   Size
	}{{"TiB", tib}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if s != 0 && s%u.mult == 0 {
			return fmt.Sprintf("%d%s", s/u.mult, u.suffix)
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// UnmarshalText lets YAML and environment values use units.
func (s *Size) UnmarshalText(b []byte) error {
	n, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = n
	return nil
}

// MarshalText prints units.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
