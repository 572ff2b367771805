// Package cli is chalupa's command line: the kong command tree of the
// operator's commands (`chalupa admin …`, `smoke`, `mcp`, `version`),
// argument parsing, exit codes (docs/operations.md, "Exit codes") and output
// formatting, with no business logic. The commands that need the server's
// packages (cli/servercmd: serve, migrate, config, rewrap) and the
// agent's are wired in by main, so this package imports neither daemon nor
// storage (docs/architecture.md, "Dependency direction").
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/mattn/go-isatty"

	"github.com/chalupa-run/chalupa/internal/datadir"
)

// root is cli's part of the command tree; Run embeds the wired-in
// commands beside it.
type root struct {
	Admin   adminCmd   `cmd:"" help:"Operate a running daemon through its admin API."`
	Smoke   smokeCmd   `cmd:"" help:"Run the private smoke test against a running chalupa (synthetic environment, no droplets)."`
	MCP     mcpCmd     `cmd:"" name:"mcp" help:"Serve the admin operations as MCP tools over standard input and output (destructive tools need a confirmation phrase; secrets are never exposed)."`
	Version versionCmd `cmd:"" help:"Print the version (chalupa --version prints the same)."`
	// VersionFlag is --version, the flag most CLIs answer, printing what
	// the version command prints; hidden, so that every command's help
	// does not list it (the version command's help names it).
	VersionFlag versionFlag `name:"version" hidden:"" help:"Print the version, as chalupa version does, and exit."`
	// Completion prints a shell's completion script.
	Completion completionCmd `cmd:"" help:"Print the shell completion script for bash, zsh or fish (subcommands and flags, answered by this binary)."`
}

// commandOrder is the order `chalupa --help` lists the top-level commands
// in, whichever package declares them; a command not listed comes last.
var commandOrder = []string{"serve", "migrate", "config", "admin", "agent", "rewrap", "smoke", "mcp", "completion", "version"}

// ExitUsage is the exit status for unknown flags, missing arguments and other
// command-line mistakes (the sysexits/BSD convention most CLIs follow),
// including a flag value that breaks the command's own rules on its face
// (--lag-limit below 1s, a --url that is not an https origin off loopback).
// A refusal that depends on anything beyond the command line (a file, the
// configuration serve reads, the daemon's answer) exits 1
// (docs/operations.md, "Exit codes").
const ExitUsage = 2

// Env is the process as a command sees it: its arguments, environment and
// standard streams. main passes the real ones (OS); tests pass their own.
type Env struct {
	// Args are the command-line arguments after the program's name.
	Args []string
	// LookupEnv reads one environment variable (os.LookupEnv's contract).
	LookupEnv func(key string) (string, bool)
	// Stdin, Stdout and Stderr are the standard streams.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// OS is the running process's arguments, environment and streams.
func OS() Env {
	return Env{Args: os.Args[1:], LookupEnv: os.LookupEnv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
}

// Getenv is the variable's value, empty when unset.
func (e *Env) Getenv(key string) string {
	v, _ := e.LookupEnv(key)
	return v
}

// isTerminal reports whether r is a terminal (only an *os.File can be).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// exitError carries an exit status out of a command's Run.
type exitError struct {
	code int
	err  error
}

// Error is the wrapped error's message ("" for none: nothing is printed).
func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

// ExitCode is the process's exit status.
func (e *exitError) ExitCode() int { return e.code }

// Exit returns an error that makes Run print err (unless nil) and exit
// with code, for the wired-in commands; ExitUsage also prints the usage line.
func Exit(code int, err error) error { return &exitError{code: code, err: err} }

// exitCoder is an error that carries its exit status: Exit's, or a
// wired-in package's own.
type exitCoder interface {
	error
	ExitCode() int
}

// exitPanic is how kong's exit (after --help) unwinds to Run.
type exitPanic struct{ code int }

// Wiring is what main hands Run from packages cli may not import.
type Wiring struct {
	// Commands are pointers to structs of kong commands (the server's, the
	// agent's), embedded at the top level beside cli's own.
	Commands []any
	// OpenAPI renders the document `admin api --openapi` prints
	// (daemon.OpenAPI: its schemas come from the server's wire types); nil
	// makes the flag exit 1.
	OpenAPI func(version string) ([]byte, error)
}

// Run parses env.Args, runs the command and returns the exit status: 0,
// 1 for a refusal or failure, ExitUsage for a command-line mistake, or a
// command's own (docs/operations.md, "Exit codes").
func Run(env Env, w Wiring) (code int) {
	var r root
	parser, err := newParser(&r, &env, w)
	if err != nil {
		fmt.Fprintln(env.Stderr, "chalupa:", err)
		return 1
	}
	defer func() {
		if p := recover(); p != nil {
			ep, ok := p.(exitPanic)
			if !ok {
				panic(p)
			}
			code = ep.code
		}
	}()
	// A shell's completion script calls chalupa with the line typed in
	// COMP_LINE: answered here, before anything is parsed or run.
	completeLine(&env, parser)
	ctx, err := parser.Parse(env.Args)
	if err != nil {
		var pe *kong.ParseError
		if errors.As(err, &pe) {
			fmt.Fprintf(env.Stderr, "chalupa: %v\n", err)
			for _, hint := range envHints(pe.Context) {
				fmt.Fprintln(env.Stderr, "chalupa:", hint)
			}
			printUsage(env.Stderr, pe.Context)
			return ExitUsage
		}
		fmt.Fprintln(env.Stderr, "chalupa:", err)
		return ExitUsage
	}
	if err := ctx.Run(); err != nil {
		var ee exitCoder
		if errors.As(err, &ee) {
			msg := ee.Error()
			if m, ok := ee.(interface{ ExitMessage() string }); ok {
				msg = m.ExitMessage()
			}
			if msg != "" {
				fmt.Fprintln(env.Stderr, "chalupa:", msg)
			}
			// A command-line mistake found by a command itself (a bad
			// --body, a missing operationId) reads like one kong found.
			if ee.ExitCode() == ExitUsage {
				printUsage(env.Stderr, ctx)
			}
			return ee.ExitCode()
		}
		fmt.Fprintln(env.Stderr, "chalupa:", err)
		return 1
	}
	return 0
}

// newParser builds the command-line parser over r and w's commands (the
// accounting test walks the same tree). Commands reach env through kong's
// bindings (a Run(*Env) parameter) or, under admin, through adminCmd.
func newParser(r *root, env *Env, w Wiring) (*kong.Kong, error) {
	r.Admin.env, r.Admin.openAPI = env, w.OpenAPI
	opts := []kong.Option{
		kong.Name("chalupa"),
		kong.Description("chalupa: control plane for short-lived DigitalOcean environments."),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Vars{"default_data_dir": datadir.DefaultDir},
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(code int) { panic(exitPanic{code}) }),
		kong.Bind(env),
		kong.Resolvers(envResolver(env)),
	}
	for _, c := range w.Commands {
		opts = append(opts, kong.Embed(c))
	}
	opts = append(opts, kong.PostBuild(func(k *kong.Kong) error {
		slices.SortStableFunc(k.Model.Children, func(a, b *kong.Node) int {
			return orderOf(a.Name) - orderOf(b.Name)
		})
		return nil
	}))
	return kong.New(r, opts...)
}

// NewParser is the parser Run builds over w, for tests that walk or parse
// the whole command tree (the help golden, the README's commands). Parsing
// --help through it panics out of kong; use Run for that.
func NewParser(env *Env, w Wiring) (*kong.Kong, error) {
	var r root
	return newParser(&r, env, w)
}

// orderOf is name's place in commandOrder (past the end when unlisted).
func orderOf(name string) int {
	if i := slices.Index(commandOrder, name); i >= 0 {
		return i
	}
	return len(commandOrder)
}

// envResolver gives flags their variables (env:"…") from env. kong reads
// the process's own environment itself, so the resolver answers only where
// env differs from it: a test's injected environment, never a second
// reading of the real one (kong's error for a bad value names the variable).
func envResolver(env *Env) kong.Resolver {
	return kong.ResolverFunc(func(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
		for _, name := range flag.Envs {
			v, ok := env.LookupEnv(name)
			if !ok {
				continue
			}
			if real, rok := os.LookupEnv(name); rok && real == v {
				return nil, nil
			}
			return v, nil
		}
		return nil, nil
	})
}

// printUsage writes the usage line and the pointer to --help that follow
// every command-line mistake, whether kong or a command's Run found it.
func printUsage(w io.Writer, ctx *kong.Context) {
	fmt.Fprintf(w, "usage: %s\nrun '%s --help' for details\n", usageLine(ctx), commandPath(ctx))
}

// commandPath is "chalupa admin env create" for the command being parsed.
func commandPath(ctx *kong.Context) string {
	if ctx == nil {
		return "chalupa"
	}
	p := "chalupa"
	if s := ctx.Command(); s != "" {
		for _, n := range ctx.Path {
			if n.Command != nil {
				p += " " + n.Command.Name
			}
		}
	}
	return p
}

// usageLine is the one-line synopsis of the command being parsed.
func usageLine(ctx *kong.Context) string {
	if ctx == nil || ctx.Selected() == nil {
		return "chalupa <command> [flags]"
	}
	return "chalupa " + ctx.Selected().Summary()
}

// envHints names, for each required flag left unset on the command line
// that an environment variable can give instead, that variable: kong's
// "missing flags" message names the flag alone, and `config cloud-init`'s
// --url is usually CHALUPA_ORIGIN (docs/operations.md, "Agent install").
func envHints(ctx *kong.Context) []string {
	if ctx == nil {
		return nil
	}
	var out []string
	for _, f := range ctx.Flags() {
		if f.Required && !f.Set && len(f.Envs) > 0 {
			out = append(out, fmt.Sprintf("--%s can also come from %s", f.Name, strings.Join(f.Envs, " or ")))
		}
	}
	return out
}
