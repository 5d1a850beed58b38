package durashuffle

import (
	"slices"
	"testing"

	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/reader"
)

// TestMetricLabelsAreTheirSources: the label values metrics starts at 0
// are exactly the values that reach it: the reader's sources and
// fallback reasons and the commit guard's states. metrics keeps its own
// lists so as to import nothing above it; a value added on one side only
// fails here, naming both lists.
func TestMetricLabelsAreTheirSources(t *testing.T) {
	states := []string{string(GuardUnprobed), string(GuardEnforced), string(GuardNotEnforced), string(GuardError), string(GuardOff)}
	for _, c := range []struct {
		name          string
		metrics, want []string
	}{
		{"metrics.ServedSources vs reader.ServedSources", metrics.ServedSources, reader.ServedSources},
		{"metrics.FallbackReasons vs reader.FallbackReasons", metrics.FallbackReasons, reader.FallbackReasons},
		{"metrics.CommitGuardStates vs the Guard* constants", metrics.CommitGuardStates, states},
	} {
		if !slices.Equal(c.metrics, c.want) {
			t.Errorf("%s: %q, want %q", c.name, c.metrics, c.want)
		}
	}
}
