//go:build !bench

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// benchCommand stands in for the bench in a binary built without it
// (go run ./cmd/durashuffle, as make run does): the bench's plots, fonts
// and shaped link are 17 modules (of 73) that no other command needs.
func (a *app) benchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "Measure durashuffle over a shaped link (not in this binary: make build)",
		Long: `bench measures durashuffle's write and read paths over a shaped link and
against the alternatives. It is built only with -tags bench, so that the
demo's build leaves its plotting and font libraries out. Build the binary
with it and run it from there:

  make build && ./bin/durashuffle bench --help
  go run -tags bench ./cmd/durashuffle bench write`,
		Example:            `  make build && ./bin/durashuffle bench write --rounds 1`,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(*cobra.Command, []string) error {
			return errNoBench
		},
	}
}

var errNoBench = errors.New("bench is not in this binary, which was built without -tags bench; " +
	"build it with make build (bin/durashuffle) or go build -tags bench ./cmd/durashuffle")
