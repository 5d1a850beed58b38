package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/manifest"
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
	// Plan is the combine plan --combine made (absent without --combine,
	// or when the stage was combined already); Combined says whether the
	// stage was combined.
	Plan     *combine.Plan `json:"plan,omitempty"`
	Combined bool          `json:"combined"`
}

func (a *app) sealCommand() *cobra.Command {
	var (
		sf       stageFlags
		workers  int
		asJSON   bool
		withComb bool
		parallel int
	)
	cmd := &cobra.Command{
		Use:   "seal",
		Short: "Merge the worker manifests of a stage into its stage manifest",
		Long: `seal merges the manifests of workers 0..N-1 of a stage into the stage
manifest, one object from which a reader opens the whole stage with a
single GET. It fails naming the workers that have not committed. Sealing
again with the same committed attempts succeeds and changes nothing.

With --combine it then combines the stage here (as durashuffle combine
with its default plan, --parallel tasks at a time) when the plan says
combining pays, and otherwise says it did not, with the plan's predicted
GETs and cost with and without.`,
		Example: `  durashuffle seal --bucket shuffle --query q42 --stage 1 --workers 8
  durashuffle seal --bucket shuffle --query q42 --stage 1 --workers 1000 --combine --parallel 8`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			if workers < 1 {
				return usagef("--workers must be at least 1, got %d", workers)
			}
			if parallel < 1 {
				return usagef("--parallel must be at least 1, got %d", parallel)
			}
			c, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			start := time.Now()
			var s *manifest.Stage
			var plan *combine.Plan
			if withComb {
				s, plan, err = c.SealCombined(cmd.Context(), sf.query, sf.stage, workers, parallel, combine.Options{})
			} else {
				s, err = c.Seal(cmd.Context(), sf.query, sf.stage, workers)
			}
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
			out.Plan, out.Combined = plan, s.Combines != nil
			if asJSON {
				return printJSON(a.stdout, out)
			}
			if plan != nil && !out.Combined {
				pr := plan.Predict
				s3, err := combine.PricesOf("s3")
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "not combined: combining does not pay: readers %d GETs ($%.6f) as written; combining %d GETs and %d PUTs and readers %d GETs ($%.6f) combined (plan %s, %d x %d)\n",
					pr.Direct.GET, s3.Dollars(pr.Direct), pr.Combine.GET, pr.Combine.PUT, pr.Combined.GET, s3.Dollars(pr.Combine)+s3.Dollars(pr.Combined), plan.ID, len(plan.Groups), len(plan.Buckets))
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
	cmd.Flags().BoolVar(&withComb, "combine", false, "then combine the stage here when its plan says combining pays (see durashuffle combine)")
	cmd.Flags().IntVar(&parallel, "parallel", 4, "combine tasks run at once with --combine")
	return cmd
}
