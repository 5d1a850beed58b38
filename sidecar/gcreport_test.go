package sidecar

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/gc"
)

// TestGCReportWire: the gc action's answer is byte for byte the JSON of
// the gc tool's report (what `durashuffle gc --json` prints), for a
// report with every field set, one with empty lists and one with nil
// lists. A field added to gc.Report and not to flightclient.GCReport (or
// not converted) fails here, by name.
func TestGCReportWire(t *testing.T) {
	full := gc.Report{}
	fill(reflect.ValueOf(&full).Elem(), 1)
	empty := gc.Report{Prefix: "p/", Uploads: []gc.Upload{}, Orphans: []gc.Object{}, Stages: []gc.Stage{}, Skipped: []string{}}
	for name, r := range map[string]gc.Report{"full": full, "empty lists": empty, "zero": {}} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(gcReport(r))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s report: the gc action answers\n%s\nthe gc tool prints\n%s", name, got, want)
		}
	}
	// Every field of the full report is set, so none can be lost unseen.
	for i := range reflect.TypeFor[gc.Report]().NumField() {
		f := reflect.TypeFor[gc.Report]().Field(i)
		if reflect.ValueOf(full).Field(i).IsZero() {
			t.Errorf("the full report leaves gc.Report.%s zero", f.Name)
		}
	}
}

// fill sets every field of v to a value derived from n: strings, numbers,
// booleans, times, and slices of one filled element.
func fill(v reflect.Value, n int) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, n, time.UTC)))
			return
		}
		for i := range v.NumField() {
			fill(v.Field(i), n+i+1)
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), n)
		v.Set(s)
	case reflect.String:
		v.SetString("s" + string(rune('a'+n%26)))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(n))
	case reflect.Bool:
		v.SetBool(true)
	}
}
