package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/durashuffle/durashuffle/manifest"
)

type lsStage struct {
	Stage   int  `json:"stage"`
	Sealed  bool `json:"sealed"`
	Workers int  `json:"workers"` // committed worker manifests
}

type lsQuery struct {
	Query  string    `json:"query"`
	Stages []lsStage `json:"stages"`
}

type lsOutput struct {
	Bucket  string    `json:"bucket"`
	Prefix  string    `json:"prefix"`
	Queries []lsQuery `json:"queries"`
}

func (a *app) lsCommand() *cobra.Command {
	var (
		query  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List queries and their committed stages",
		Long: `ls lists the queries under the configured prefix and, for each, the stages
that have committed output: sealed stages, and unsealed stages with at
least one committed worker, with the number of committed workers. With
--query it lists that query's stages only.`,
		Example: `  durashuffle ls --bucket shuffle
  durashuffle ls --bucket shuffle --query q42 --json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if cmd.Flags().Changed("query") {
				if err := manifest.ValidateID("query", query); err != nil {
					return err
				}
			}
			c, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			queries := []string{query}
			if query == "" {
				if queries, err = manifest.ListQueries(ctx, c.Store(), c.Layout()); err != nil {
					return fmt.Errorf("list queries: %w", err)
				}
			}
			out := lsOutput{Bucket: c.Config().Store.Bucket, Prefix: c.Config().Store.Prefix, Queries: make([]lsQuery, len(queries))}
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(8)
			for i, q := range queries {
				g.Go(func() error {
					infos, err := manifest.ListStages(gctx, c.Store(), c.Layout(), q)
					if err != nil {
						return fmt.Errorf("list stages of %s: %w", q, err)
					}
					out.Queries[i] = lsQuery{Query: q, Stages: []lsStage{}}
					for _, s := range infos {
						out.Queries[i].Stages = append(out.Queries[i].Stages, lsStage{Stage: s.Stage, Sealed: s.Sealed, Workers: s.Workers})
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, out)
			}
			if query != "" && len(out.Queries[0].Stages) == 0 {
				fmt.Fprintf(a.stdout, "query %s has no committed stages\n", query)
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "QUERY\tSTAGE\tSEALED\tWORKERS")
			for _, q := range out.Queries {
				if len(q.Stages) == 0 {
					fmt.Fprintf(tw, "%s\t-\t-\t-\n", q.Query)
				}
				for _, s := range q.Stages {
					sealed := "no"
					if s.Sealed {
						sealed = "yes"
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", q.Query, s.Stage, sealed, s.Workers)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&query, "query", "q", "", "list only this query's stages")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the listing as JSON")
	return cmd
}
