package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/manifest"
)

func (a *app) gcCommand() *cobra.Command {
	var (
		olderThan time.Duration
		grace     time.Duration
		dryRun    bool
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Abort abandoned uploads, delete uncommitted attempt data and expired results",
		Long: `gc cleans up under the configured prefix, touching only keys that have
durashuffle's layout ({query}/stage-{n}/...):

  - incomplete multipart uploads initiated more than --older-than ago
    (writers that crashed or were killed mid-upload) are aborted;
  - data objects that no committed worker or stage manifest references
    (attempts that crashed before committing, or lost the commit race),
    last modified more than --older-than ago, are deleted;
  - results stages (written with --results) whose last manifest is older
    than results_retention are deleted whole: stage manifest first, then
    worker manifests, then data, so no manifest names a deleted object;
    a combined stage (durashuffle combine) goes with its combined level;
  - of combined stages: keys of plans that lost the seal, and objects of
    tasks killed or that lost, older than --older-than; with
    --combined-grace, the first level (worker manifests, data objects,
    index) of stages combined longer ago than that;
  - leftovers of combining a stage that is not combined (tasks killed,
    a seal that never came): every key of a plan whose newest key and
    open upload are older than --older-than.

Intermediate stages are kept until their query is deleted (delete-query).
--older-than must exceed the longest a writer runs from its first part to
its commit, and the longest a combining pauses between task commits or
before its seal: gc cannot tell a crashed writer from one still uploading.
Run it with --dry-run first to see what it would remove; it is idempotent.`,
		Example: `  # What would a daily gc remove?
  durashuffle gc --bucket shuffle --older-than 24h --dry-run

  # Clean up, keeping query results for 2 days:
  durashuffle gc --bucket shuffle --older-than 24h --results-retention 48h --json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("older-than") {
				return usagef("--older-than is required (e.g. 24h): uploads and uncommitted data younger than it are left alone")
			}
			if olderThan < 0 {
				return usagef("--older-than must not be negative, got %v", olderThan)
			}
			if grace < 0 {
				return usagef("--combined-grace must not be negative, got %v", grace)
			}
			ctx := cmd.Context()
			c, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			cfg := c.Config()
			p, err := gc.NewPlan(ctx, c.Store(), c.Layout(), gc.Options{
				OlderThan: olderThan, ResultsRetention: cfg.GC.ResultsRetention.D(), CombinedGrace: grace,
			})
			if err != nil {
				return err
			}
			r := p.Report() // --dry-run is the plan alone
			if !dryRun {
				if r, err = p.Apply(ctx, c.Store()); err != nil {
					return err
				}
			}
			a.log.Debug("gc done", "uploads_aborted", r.Totals.UploadsAborted, "objects_deleted", r.Totals.ObjectsDeleted,
				"bytes_deleted", r.Totals.BytesDeleted, "dry_run", dryRun)
			if asJSON {
				return printJSON(a.stdout, r)
			}
			printGC(a.stdout, cfg.Store.Bucket, olderThan, cfg.GC.ResultsRetention.D(), r)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&olderThan, "older-than", 0, "only abort uploads and delete uncommitted data older than this (required; e.g. 24h)")
	fs.DurationVar(&grace, "combined-grace", 0, "delete the first level of stages combined longer ago than this (0: keep it)")
	fs.BoolVar(&dryRun, "dry-run", false, "report what would be removed, remove nothing")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printGC(w io.Writer, bucket string, olderThan, retention time.Duration, r gc.Report) {
	would := func(did, would string) string {
		if r.DryRun {
			return would
		}
		return did
	}
	t := r.Totals
	if r.DryRun {
		fmt.Fprintln(w, "dry run: nothing was removed")
	}
	fmt.Fprintf(w, "gc of s3://%s/%s: uploads and uncommitted data older than %v (before %s); results older than %v (before %s)\n",
		bucket, r.Prefix, olderThan, r.Cutoff.UTC().Format(time.RFC3339), retention, r.ResultsCutoff.UTC().Format(time.RFC3339))
	if !r.CombinedCutoff.IsZero() {
		fmt.Fprintf(w, "  first levels of stages combined before %s\n", r.CombinedCutoff.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "  %s %d incomplete multipart uploads\n", would("aborted", "would abort"), t.UploadsAborted)
	for _, u := range r.Uploads {
		fmt.Fprintf(w, "    %s (initiated %s)\n", u.Key, u.Initiated.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "  %s %d uncommitted, superseded or leftover objects (%s)\n", would("deleted", "would delete"), t.OrphanObjects, mib(t.OrphanBytes))
	for _, o := range r.Orphans {
		fmt.Fprintf(w, "    %s (%s)\n", o.Key, mib(o.Size))
	}
	fmt.Fprintf(w, "  %s %d expired results stages\n", would("deleted", "would delete"), t.StagesDeleted)
	for _, s := range r.Stages {
		fmt.Fprintf(w, "    %s stage %d: %d manifests, %d data objects, %s (committed %s)\n",
			s.Query, s.Stage, s.Manifests, s.Objects, mib(s.Bytes), s.CommittedAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "  %s %d objects, %s in all\n", would("removed", "would remove"), t.ObjectsDeleted, mib(t.BytesDeleted))
	fmt.Fprintf(w, "  scanned %d objects (%s), %d uploads, %d stages; %d keys outside the layout left alone\n",
		r.Scanned.Objects, mib(r.Scanned.Bytes), r.Scanned.Uploads, r.Scanned.Stages, r.Scanned.Foreign)
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "  skipped: %s\n", s)
	}
}

func (a *app) deleteQueryCommand() *cobra.Command {
	var (
		query  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "delete-query",
		Short: "Delete every stage of a query and abort its uploads",
		Long: `delete-query removes everything under the query's prefix: the stage
manifests first, then the worker manifests (readers stop finding the
stages before any data goes), then the data objects, and then aborts the
multipart uploads still open there. Writers of the query that are still
running fail or leave objects behind that gc removes. Idempotent.`,
		Example: `  durashuffle delete-query --bucket shuffle --query q42`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("query") {
				return usagef("--query is required")
			}
			if err := manifest.ValidateID("query", query); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			r, err := gc.DeleteQuery(ctx, c.Store(), c.Layout(), query)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, r)
			}
			fmt.Fprintf(a.stdout, "deleted query %s: %d stages, %d objects (%s); aborted %d multipart uploads\n",
				query, r.Totals.StagesDeleted, r.Totals.ObjectsDeleted, mib(r.Totals.BytesDeleted), r.Totals.UploadsAborted)
			return nil
		},
	}
	cmd.Flags().StringVarP(&query, "query", "q", "", "query ID ([A-Za-z0-9._-], at most 128 characters)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
