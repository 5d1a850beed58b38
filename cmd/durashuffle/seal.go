package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

type sealSummary struct {
	Query        string           `json:"query"`
	Stage        int              `json:"stage"`
	Sealed       bool             `json:"sealed"`
	Workers      int              `json:"workers"`
	Partitions   int              `json:"partitions"`
	Rows         int64            `json:"rows"`
	Objects      int              `json:"objects"`
	Frames       int              `json:"frames"`
	BytesLogical int64            `json:"bytes_logical"`
	BytesStored  int64            `json:"bytes_stored"`
	Key          string           `json:"key"`
	Seconds      float64          `json:"seconds"`
	Requests     map[string]int64 `json:"requests"`
	// CombinedFrom is the first level's worker count when the stage was
	// already combined (Workers then counts the combine tasks).
	CombinedFrom int `json:"combined_from,omitempty"`
}

func (a *app) sealCommand() *cobra.Command {
	var (
		sf      stageFlags
		workers int
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "seal",
		Short: "Merge the worker manifests of a stage into its stage manifest",
		Long: `seal merges the manifests of workers 0..N-1 of a stage into the stage
manifest, one object from which a reader opens the whole stage with a
single GET. It fails naming the workers that have not committed. Sealing
again with the same committed attempts succeeds and changes nothing.`,
		Example: `  durashuffle seal --bucket shuffle --query q42 --stage 1 --workers 8`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			if workers < 1 {
				return usagef("--workers must be at least 1, got %d", workers)
			}
			c, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			start := time.Now()
			s, err := c.Seal(cmd.Context(), sf.query, sf.stage, workers)
			if err != nil {
				return err
			}
			out := sealSummary{
				Query: s.Query, Stage: s.Stage, Sealed: true, Workers: len(s.Workers), Partitions: s.Partitions,
				Rows: s.Totals.Rows, Objects: s.Totals.Objects, Frames: s.Totals.Frames,
				BytesLogical: s.Totals.BytesLogical, BytesStored: s.Totals.BytesStored,
				Key:      c.Layout().StageManifestKey(sf.query, sf.stage),
				Seconds:  round(time.Since(start).Seconds()),
				Requests: c.Counter().Requests(),
			}
			if s.Combines != nil {
				out.CombinedFrom = s.Combines.Workers
			}
			if asJSON {
				return printJSON(a.stdout, out)
			}
			if s.Combines != nil {
				fmt.Fprintf(a.stdout, "sealed %s stage %d, combined from %d workers: %d tasks, %d partitions, %d rows, %s stored in %d objects (%s)\n",
					out.Query, out.Stage, out.CombinedFrom, out.Workers, out.Partitions, out.Rows, mib(out.BytesStored), out.Objects, out.Key)
				return nil
			}
			fmt.Fprintf(a.stdout, "sealed %s stage %d: %d workers, %d partitions, %d rows, %s stored in %d objects (%s)\n",
				out.Query, out.Stage, out.Workers, out.Partitions, out.Rows, mib(out.BytesStored), out.Objects, out.Key)
			return nil
		},
	}
	sf.bind(cmd.Flags())
	cmd.Flags().IntVar(&workers, "workers", 0, "number of workers (IDs 0..N-1) that must have committed")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
