package main

import (
	"fmt"
	"strings"
	"text/template"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// A command's help lists its own flags one line each, and the flags of
// the configuration keys it uses by name only, a line or a few per use:
// each key's meaning, default and cost are in docs/configuration.md,
// which is generated from the same text, so that `durashuffle demo
// --help` fits on one screen.

// configUseAnnotation marks a flag bound to a configuration key with the
// name of its use (help only: parsing does not look at it).
const configUseAnnotation = "durashuffle-config-use"

// useNames are the uses in the order help lists them.
var useNames = []struct {
	use  keyUse
	name string
}{
	{useStore, "connection"},
	{usePut, "objects put"},
	{useWrite, "write path"},
	{useRead, "read path"},
	{useHedge, "hedging"},
	{useGC, "gc"},
	{useSidecar, "sidecar"},
	{useAuth, "token"},
	{useKey, "encryption"},
}

func useName(u keyUse) string {
	for _, n := range useNames {
		if u&n.use != 0 {
			return n.name
		}
	}
	return "other"
}

// ownFlags renders the flags of fs that are not configuration keys, one
// line each.
func ownFlags(fs *pflag.FlagSet) string {
	own := pflag.NewFlagSet("own", pflag.ContinueOnError)
	own.SortFlags = false
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Annotations[configUseAnnotation]; !ok && !f.Hidden {
			own.AddFlag(f)
		}
	})
	return strings.TrimRight(own.FlagUsages(), " \n")
}

// configFlagGroups renders the configuration flags cmd takes, by use.
func configFlagGroups(cmd *cobra.Command) string {
	byUse := map[string][]string{}
	add := func(f *pflag.Flag) {
		if u, ok := f.Annotations[configUseAnnotation]; ok && len(u) == 1 && !f.Hidden {
			byUse[u[0]] = append(byUse[u[0]], "--"+f.Name)
		}
	}
	cmd.LocalFlags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	if len(byUse) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Configuration flags, one per key (--chunk-size sets chunk_size), each in docs/configuration.md:\n")
	const width = 100
	for _, n := range useNames {
		names := byUse[n.name]
		if len(names) == 0 {
			continue
		}
		line := fmt.Sprintf("  %-13s", n.name+":")
		for i, f := range names {
			if i > 0 && len(line)+1+len(f) > width {
				b.WriteString(line + "\n")
				line = strings.Repeat(" ", 14)
			}
			if i > 0 {
				line += " "
			}
			line += f
		}
		b.WriteString(line + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// oneLine is the first sentence of a key's documentation, at most about
// 80 characters: a configuration flag's usage (what shell completion
// shows), the rest being in docs/configuration.md.
func oneLine(doc string) string {
	if i := strings.Index(doc, ". "); i >= 0 {
		doc = doc[:i]
	}
	doc = strings.TrimSuffix(doc, ".")
	const most = 80
	if len(doc) > most {
		cut := strings.LastIndexByte(doc[:most], ' ')
		if cut <= 0 {
			cut = most
		}
		doc = strings.TrimRight(doc[:cut], ",;:") + " ..."
	}
	return doc
}

func init() {
	cobra.AddTemplateFuncs(template.FuncMap{"ownFlags": ownFlags, "configFlags": configFlagGroups})
}

// usageTemplate is cobra's default with the flag sections replaced.
const usageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{with ownFlags .LocalFlags}}

Flags:
{{.}}{{end}}{{with configFlags .}}

{{.}}{{end}}{{with ownFlags .InheritedFlags}}

Global Flags:
{{.}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`
