package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/combine"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// combineSummary is what combine prints with --json.
type combineSummary struct {
	Query    string           `json:"query"`
	Stage    int              `json:"stage"`
	Plan     *combine.Plan    `json:"plan,omitempty"`
	Group    *combineGroup    `json:"group,omitempty"`
	Tasks    []combineTask    `json:"tasks,omitempty"`
	Sealed   bool             `json:"sealed"`
	Combined bool             `json:"combined"` // the stage manifest names the combined level
	Key      string           `json:"key,omitempty"`
	Seconds  float64          `json:"seconds"`
	Requests map[string]int64 `json:"requests"`
	// RequestPrices are the store's request classes and list prices;
	// RequestsPredicted the plan's prediction with the combining tasks'
	// objects stored as that store stores them (Plan.PredictOn).
	RequestPrices     *combine.Prices     `json:"request_prices,omitempty"`
	RequestsPredicted *combine.Prediction `json:"requests_predicted_on_store,omitempty"`
}

// combineGroup is a group --group formed (or found formed).
type combineGroup struct {
	Group   int      `json:"group"`
	Workers []string `json:"workers"`
}

type combineTask struct {
	Task   int    `json:"task"`
	Worker string `json:"worker"`
	Wrote  bool   `json:"wrote"`
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	Key    string `json:"key,omitempty"`
}

func (a *app) combineCommand() *cobra.Command {
	var (
		sf       stageFlags
		o        combine.Options
		task     int
		parallel int
		seal     bool
		plan     bool
		asJSON   bool
		target   durashuffle.Size
		taskCap  durashuffle.Size
		partSize durashuffle.Size
		memBytes = durashuffle.Size(combine.DefaultMemoryBytes)
		// A plan made while the stage is written.
		expWorkers, expParts int
		expBytes             durashuffle.Size
		group                int
		groupWorkers         []string
	)
	cmd := &cobra.Command{
		Use:   "combine",
		Short: "Rewrite a sealed stage into G x J combined objects that readers fetch in fewer GETs",
		Long: `combine plans J partition buckets by G writer groups for a sealed stage,
runs the G x J tasks (each reads its group's writer objects' frames of its
bucket, one ranged GET per object, checks every frame's CRC32C and copies
the frames into one object, committed by a task manifest), and seals the
combined level: from then on every reader of the stage (read, the
sidecar, the library's OpenStage) reads the combined objects, G GETs per
partition range instead of one per writer object.

Without --task, --seal or --plan it does all three in this process,
--parallel tasks at a time. --task N runs task N only (anywhere, any
number of times: the first commit wins), --seal seals once every task
has committed (it names the tasks missing), and --plan prints the plan
and the requests it predicts with and without combining. Every process
must be given the same --groups, --buckets and sizes to make the same plan.

With --expect-workers N and --expect-partitions P (and --expect-bytes, the
stage's expected size) the plan is made while the stage is written: its
buckets and the sizes of its groups are fixed before any writer commits,
group g is the next workers to commit after those of groups 0..g-1, and a
task runs as soon as its group's workers have committed. --group G forms
group G (from the workers --group-workers names, or the next to commit)
and prints its workers; --task forms its group if no process has; --seal
needs the first level sealed (seal --workers N) and checks that the
groups hold exactly its workers.`,
		Example: `  durashuffle combine --bucket shuffle -q q42 -s 1 --plan
  durashuffle combine --bucket shuffle -q q42 -s 1 --parallel 8
  durashuffle combine --bucket shuffle -q q42 -s 1 --groups 4 --buckets 16 --task 5
  durashuffle combine --bucket shuffle -q q42 -s 1 --expect-workers 64 --expect-partitions 64 --expect-bytes 64GiB --task 5`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			fs := cmd.Flags()
			modes := 0
			for _, f := range []string{"task", "seal", "plan", "group"} {
				if fs.Changed(f) {
					modes++
				}
			}
			switch {
			case modes > 1:
				return usagef("--task, --seal, --plan and --group are mutually exclusive")
			case fs.Changed("expect-workers") != fs.Changed("expect-partitions"):
				return usagef("--expect-workers and --expect-partitions go together")
			case fs.Changed("expect-workers") && (expWorkers < 1 || expParts < 1):
				return usagef("--expect-workers and --expect-partitions must be at least 1, got %d and %d", expWorkers, expParts)
			case (fs.Changed("group") || fs.Changed("group-workers") || fs.Changed("expect-bytes")) && !fs.Changed("expect-workers"):
				return usagef("--group, --group-workers and --expect-bytes need --expect-workers (a plan made while the stage is written)")
			case fs.Changed("group-workers") && !fs.Changed("group"):
				return usagef("--group-workers needs --group")
			case o.Groups < 0 || o.Buckets < 0:
				return usagef("--groups and --buckets must be at least 1, got %d and %d", o.Groups, o.Buckets)
			case parallel < 1:
				return usagef("--parallel must be at least 1, got %d", parallel)
			case fs.Changed("task") && task < 0:
				return usagef("--task must be at least 0, got %d", task)
			case fs.Changed("part-bytes") && (partSize < store.MinPartSize || partSize > store.MaxPartSize):
				return usagef("--part-bytes must be from %d bytes (5MiB) to %d bytes (5GiB), got %d", store.MinPartSize, int64(store.MaxPartSize), int64(partSize))
			}
			// Unset, the plan's defaults: they depend on whether tasks
			// go to disk.
			o.TargetGetBytes, o.PartBytes, o.MemoryBytes = int64(target), int64(partSize), int64(memBytes)
			if fs.Changed("task-cap-bytes") {
				o.TaskCapBytes = int64(taskCap) // else 512MiB, or with spill on 16GiB on disk
			}
			if fs.Changed("expect-workers") {
				o.Expected = combine.Expect(expWorkers, expParts, int64(expBytes))
			}
			c, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			start := time.Now()
			ctx := cmd.Context()
			s, err := c.Combine(ctx, sf.query, sf.stage, o)
			if err != nil {
				return err
			}
			out := combineSummary{Query: sf.query, Stage: sf.stage, Plan: s.Plan()}
			prices, err := storePrices(c.Config())
			if err != nil {
				return err
			}
			out.RequestPrices = &prices
			if p := out.Plan; p != nil {
				pr := p.PredictOn(prices)
				out.RequestsPredicted = &pr
			}
			var tasks []*combine.Task
			switch {
			case plan:
			case fs.Changed("group"):
				ids, err := s.FormGroup(ctx, group, groupWorkers)
				if err != nil {
					return err
				}
				out.Group = &combineGroup{Group: group, Workers: ids}
			case fs.Changed("task"):
				t, err := s.RunTask(ctx, task)
				if err != nil {
					return err
				}
				tasks = []*combine.Task{t}
			case seal:
				if _, err := s.Seal(ctx); err != nil {
					return err
				}
				out.Sealed = true
			default:
				if tasks, err = s.RunAll(ctx, parallel); err != nil {
					return err
				}
				if _, err := s.Seal(ctx); err != nil {
					return err
				}
				out.Sealed = true
			}
			for _, t := range tasks {
				ct := combineTask{Task: t.N, Worker: t.Manifest.Worker, Wrote: t.Wrote, Rows: t.Manifest.Totals.Rows, Bytes: t.Manifest.Totals.BytesStored}
				if len(t.Manifest.Objects) > 0 {
					ct.Key = c.Layout().ObjectKey(sf.query, sf.stage, t.Manifest.Objects[0].Key)
				}
				out.Tasks = append(out.Tasks, ct)
			}
			out.Combined = s.Combined() != nil
			if out.Combined {
				out.Key = c.Layout().StageManifestKey(sf.query, sf.stage)
			}
			out.Seconds = round(time.Since(start).Seconds())
			out.Requests = c.Counter().Requests()
			if asJSON {
				return printJSON(a.stdout, out)
			}
			printCombine(a.stdout, out, s.Combined())
			return nil
		},
	}
	sf.bind(cmd.Flags())
	fs := cmd.Flags()
	fs.IntVar(&o.Groups, "groups", 0, "writer groups G (default: sized from the stage's bytes)")
	fs.IntVar(&o.Buckets, "buckets", 0, "partition buckets J (default: sized from the stage's bytes)")
	fs.IntVar(&task, "task", 0, "run task N only, 0 <= N < G x J")
	fs.IntVar(&parallel, "parallel", 4, "tasks run at once without --task")
	fs.BoolVar(&seal, "seal", false, "only seal: publish the combined level once every task has committed")
	fs.BoolVar(&plan, "plan", false, "only print the plan and the predicted requests")
	fs.Var(sizeFlag(&target), "target-get-bytes", fmt.Sprintf("GET size K the plan sizes buckets and groups for (default %v; unset, with spill on, a plan whose tasks would be over --memory-bytes takes the fewest tasks under --task-cap-bytes instead), e.g. 64MiB",
		durashuffle.Size(combine.DefaultTargetGetBytes)))
	fs.Var(sizeFlag(&taskCap), "task-cap-bytes", fmt.Sprintf("largest task: its memory (default %v), or with spill on its disk in spill_dir when over --memory-bytes (default %v)",
		durashuffle.Size(combine.DefaultTaskCapBytes), durashuffle.Size(combine.DefaultDiskTaskCapBytes)))
	fs.Var(sizeFlag(&memBytes), "memory-bytes", "largest task held in memory; with spill on, a larger one is laid out in a file in spill_dir (counted against spill_bytes), e.g. 1GiB")
	fs.Var(sizeFlag(&partSize), "part-bytes", fmt.Sprintf("part size of a combined object (default %v in memory, %v on disk; a plan of fewer than 32 tasks cuts each in 32 parts of at most this), e.g. 512MiB",
		durashuffle.Size(combine.DefaultPartBytes), durashuffle.Size(combine.DefaultDiskPartBytes)))
	fs.IntVar(&o.Readers, "readers", 0, "readers R expected, each reading a range of partitions (default: one per partition)")
	fs.IntVar(&expWorkers, "expect-workers", 0, "plan while the stage is written: the stage's N workers")
	fs.IntVar(&expParts, "expect-partitions", 0, "plan while the stage is written: the stage's partitions")
	fs.Var(sizeFlag(&expBytes), "expect-bytes", "plan while the stage is written: the stage's expected stored bytes, e.g. 64GiB")
	fs.IntVar(&group, "group", 0, "form group G of a plan made while the stage is written, and print its workers")
	fs.StringSliceVar(&groupWorkers, "group-workers", nil, "the workers of --group, as the engine names them (default: the next to commit)")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func printCombine(w io.Writer, out combineSummary, m *manifest.Stage) {
	if p := out.Plan; p != nil {
		pr, prices := p.Predict, *out.RequestPrices
		if out.RequestsPredicted != nil {
			pr = *out.RequestsPredicted
		}
		fmt.Fprintf(w, "plan %s of %s stage %d: %d tasks = %d groups x %d buckets over %d writer objects, %d partitions, %s; %d readers\n",
			p.ID, out.Query, out.Stage, p.Tasks(), len(p.Groups), len(p.Buckets), p.Objects, p.Partitions, mib(p.Bytes), p.Readers)
		fmt.Fprintf(w, "  requests at %s (GETs: %s, PUTs: %s)\n", priceLine(prices), prices.ReadClass, prices.WriteClass)
		fmt.Fprintf(w, "  direct:   readers %d GETs ($%.6f)\n", pr.Direct.GET, prices.Dollars(pr.Direct))
		fmt.Fprintf(w, "  combined: combining %d GETs and %d PUTs, readers %d GETs ($%.6f)\n",
			pr.Combine.GET, pr.Combine.PUT, pr.Combined.GET, prices.Dollars(pr.Combine)+prices.Dollars(pr.Combined))
		if pr.Pays {
			fmt.Fprintln(w, "  combining pays")
		} else {
			fmt.Fprintln(w, "  combining does not pay")
		}
		if len(p.OverCap) > 0 {
			fmt.Fprintf(w, "  %d tasks are over --task-cap-bytes (single partitions too large for it)\n", len(p.OverCap))
		}
	}
	if g := out.Group; g != nil {
		fmt.Fprintf(w, "group %d: workers %s\n", g.Group, strings.Join(g.Workers, ", "))
	}
	for _, t := range out.Tasks {
		verb := "committed"
		if !t.Wrote {
			verb = "already committed"
		}
		fmt.Fprintf(w, "task %d (%s) %s: %d rows, %s\n", t.Task, t.Worker, verb, t.Rows, mib(t.Bytes))
	}
	if m != nil {
		fmt.Fprintf(w, "combined %s stage %d: %d tasks, %d rows, %s stored (%s)\n",
			out.Query, out.Stage, len(m.Workers), m.Totals.Rows, mib(m.Totals.BytesStored), out.Key)
	}
}
