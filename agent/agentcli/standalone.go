package agentcli

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/alecthomas/kong"

	"github.com/chalupa-run/chalupa/internal/buildinfo"
)

// Name is the standalone agent's program name (cmd/chalupa-agent), the
// one file of the release's chalupa-agent archive.
const Name = "chalupa-agent"

// Standalone is chalupa-agent's command tree: Cmd's command types at the
// top, so `chalupa-agent run` takes exactly the flags of `chalupa agent
// run`, plus version. Only systemd-unit differs: it prints StandaloneUnit.
type Standalone struct {
	Run         agentRunCmd              `cmd:"" help:"Run the fleet agent: heartbeats with idle detection, Monitor windows, a durable spool (docs/operations.md, \"Agent\")."`
	Status      agentStatusCmd           `cmd:"" help:"Print what the agent would send now, and its spool, without sending."`
	Heartbeat   agentHeartbeatCmd        `cmd:"" help:"Send signed heartbeats whose idle state you give (the reference command)."`
	ReportRun   agentReportRunCmd        `cmd:"" name:"report-run" help:"Report a finished CI suite run (spooled, so it survives the control plane being down)."`
	SystemdUnit standaloneSystemdUnitCmd `cmd:"" name:"systemd-unit" help:"Print the agent's systemd unit (the cloud-init install writes it)."`
	Version     versionCmd               `cmd:"" help:"Print the version."`
}

type versionCmd struct{}

// Run prints "chalupa-agent VERSION (commit C, GO, OS/ARCH)": the version
// stamped into internal/buildinfo and the commit Go stamped (-buildvcs),
// "unknown" outside a checkout.
func (versionCmd) Run(k *kong.Context) error {
	commit, modified := "unknown", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if modified {
		commit += "+modified"
	}
	_, err := fmt.Fprintf(k.Stdout, "%s %s (commit %s, %s, %s/%s)\n", Name, buildinfo.Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

// NewParser builds chalupa-agent's parser over s, writing to stdout and
// stderr; exit is called for --help (with 0) and by kong's own exits.
func NewParser(s *Standalone, stdout, stderr io.Writer, exit func(int)) (*kong.Kong, error) {
	return kong.New(s,
		kong.Name(Name),
		kong.Description("chalupa-agent: the chalupa fleet agent (docs/operations.md, \"Agent\")."),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Writers(stdout, stderr),
		kong.Exit(exit),
	)
}

// Main runs chalupa-agent with args (without the program name) and returns
// the exit status: 0, 1 for a refusal, ExitUsage for a command-line mistake
// (after the usage line and a pointer to --help), as the full binary's
// `chalupa agent` does (docs/operations.md, "Exit codes"). exit is called
// for --help; the binary passes os.Exit.
func Main(args []string, stdout, stderr io.Writer, exit func(int)) int {
	var s Standalone
	parser, err := NewParser(&s, stdout, stderr, exit)
	if err != nil {
		fmt.Fprintln(stderr, Name+":", err)
		return 1
	}
	ctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", Name, err)
		var pe *kong.ParseError
		if errors.As(err, &pe) {
			printUsage(stderr, pe.Context)
		}
		return ExitUsage
	}
	if err := ctx.Run(); err != nil {
		var ee *ExitError
		if !errors.As(err, &ee) {
			fmt.Fprintln(stderr, Name+":", err)
			return 1
		}
		if ee.Err != nil {
			fmt.Fprintln(stderr, Name+":", ee.Err)
		}
		if ee.Code == ExitUsage {
			printUsage(stderr, ctx)
		}
		return ee.Code
	}
	return 0
}

// printUsage writes the usage line and the pointer to --help that follow
// every command-line mistake.
func printUsage(w io.Writer, ctx *kong.Context) {
	line, path := Name+" <command> [flags]", Name
	if ctx != nil && ctx.Selected() != nil {
		line = Name + " " + ctx.Selected().Summary()
		for _, n := range ctx.Path {
			if n.Command != nil {
				path += " " + n.Command.Name
			}
		}
	}
	fmt.Fprintf(w, "usage: %s\nrun '%s --help' for details\n", line, path)
}
