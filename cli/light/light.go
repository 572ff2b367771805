// Package light wires the light binary, cmd/chalupa: cli's commands
// (admin, mcp, smoke, version) and the agent's (agent/agentcli), without
// the server's packages, so every command starts small (docs/operations.md,
// "Footprint"). The server's commands (serve, migrate, config, rewrap)
// keep their place in the command tree and its --help, but only forward:
// they replace the process with chalupad, the full binary, found
// beside this one or on PATH, with the same arguments and environment
// (docs/operations.md, "Releases").
package light

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/chalupa-run/chalupa/agent/agentcli"
	"github.com/chalupa-run/chalupa/cli"
)

// ServerBinary is the file name of the full binary (built from the module
// root) the server commands forward to.
const ServerBinary = "chalupad"

// ErrNoServer is returned (wrapped, exit 1) when chalupad is neither beside
// this binary nor on PATH.
var ErrNoServer = errors.New(ServerBinary + " not found")

// Forwarder finds chalupad and hands it the command line. OS is the real
// one; tests inject their own.
type Forwarder struct {
	// Executable is this binary's path (os.Executable).
	Executable func() (string, error)
	// LookPath finds a program on PATH (exec.LookPath).
	LookPath func(file string) (string, error)
	// Exec replaces the process with the program at path, run with args
	// (without argv[0]) and this process's environment; it returns only on
	// failure. An error with an ExitCode (cli.Exit) ends the command with
	// that code: how a test's Exec reports the forwarded command's status.
	Exec func(path string, args []string) error
}

// OS is the Forwarder of a real process: syscall.Exec with os.Environ(),
// so chalupad keeps the process id, its signals and its exit status (the
// systemd unit, a shell's Ctrl-C and `$?` see chalupad itself).
func OS() *Forwarder {
	return &Forwarder{
		Executable: os.Executable,
		LookPath:   exec.LookPath,
		Exec: func(path string, args []string) error {
			return syscall.Exec(path, append([]string{path}, args...), os.Environ())
		},
	}
}

// Server is chalupad's path: beside this binary first (a release's
// archive unpacks both into one directory), then on PATH; never this
// binary itself (which would forward to itself forever). It returns an
// error wrapping ErrNoServer that says what to install.
func (f *Forwarder) Server() (string, error) {
	self, _ := f.Executable()
	var selfInfo os.FileInfo
	var candidates []string
	if self != "" {
		selfInfo, _ = os.Stat(self)
		candidates = append(candidates, filepath.Join(filepath.Dir(self), ServerBinary))
	}
	if p, err := f.LookPath(ServerBinary); err == nil {
		candidates = append(candidates, p)
	}
	var notExecutable []string
	for _, c := range candidates {
		fi, err := os.Stat(c)
		if err != nil || fi.IsDir() || (selfInfo != nil && os.SameFile(fi, selfInfo)) {
			continue
		}
		if fi.Mode()&0o111 == 0 {
			notExecutable = append(notExecutable, c)
			continue
		}
		return c, nil
	}
	if len(notExecutable) > 0 {
		return "", fmt.Errorf("%w: %s is there but not executable (chmod 0755 it; docs/operations.md, \"Releases\")",
			ErrNoServer, strings.Join(notExecutable, " and "))
	}
	where := "on PATH"
	if self != "" {
		where = "beside " + self + " or on PATH"
	}
	return "", fmt.Errorf("%w %s: install it from the release's chalupa_VERSION_linux_ARCH.tar.gz "+
		"(it holds chalupa and %s), or build it in a checkout with `go build -o %s .` (docs/operations.md, \"Releases\")",
		ErrNoServer, where, ServerBinary, ServerBinary)
}

// forward hands env's whole command line, unchanged, to chalupad; name
// is the command's ("migrate status"), for the error when chalupad is
// missing.
func (f *Forwarder) forward(env *cli.Env, name string) error {
	path, err := f.Server()
	if err != nil {
		return cli.Exit(1, fmt.Errorf("`chalupa %s` is a server command, run by the full binary %s: %w", name, ServerBinary, err))
	}
	err = f.Exec(path, env.Args)
	var coded interface{ ExitCode() int }
	if err == nil || errors.As(err, &coded) {
		return err
	}
	return cli.Exit(1, fmt.Errorf("run %s: %w", path, err))
}

// openAPI is `admin api --openapi` of the light binary: the document is
// built from the server's wire types, so chalupad prints it.
func (f *Forwarder) openAPI(string) ([]byte, error) {
	path, err := f.Server()
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(path, "admin", "api", "--openapi").Output()
	if err != nil {
		return nil, fmt.Errorf("%s admin api --openapi: %w", path, err)
	}
	return bytes.TrimSuffix(out, []byte("\n")), nil
}

// Wiring is the light binary's cli.Wiring over f: the agent's commands and
// the server's, as forwarding commands.
func Wiring(f *Forwarder) cli.Wiring {
	return cli.Wiring{Commands: []any{&agentCommands{}, newServerCommands(f)}, OpenAPI: f.openAPI}
}

// agentCommands puts the fleet agent's commands under `chalupa agent`, as
// in the full binary (main.go).
type agentCommands struct {
	Agent agentcli.Cmd `cmd:"" help:"The reference fleet agent."`
}

// fwd is one forwarded command: kong hands it every argument after its
// name (passthrough, --help included), and its Run hands the whole command
// line to chalupad, which parses it.
type fwd struct {
	Args []string `arg:"" optional:""`
	f    *Forwarder
}

// Run forwards the command line to chalupad.
func (c *fwd) Run(env *cli.Env, ctx *kong.Context) error {
	return c.f.forward(env, ctx.Selected().Path())
}

// serverCommands are cli/servercmd's commands as forwarding commands: the
// same names, nesting and help text, so `chalupa --help` is the full
// binary's (the root package's TestLightHelpGolden compares every
// command's help with testdata/help.golden).
type serverCommands struct {
	Serve   fwd        `cmd:"" passthrough:"" help:"Run the daemon (HTTP API, background loops, replication)."`
	Migrate migrateFwd `cmd:"" help:"Inspect schema migrations (serve applies them)."`
	Config  configFwd  `cmd:"" help:"Check the configuration read from the environment."`
	Rewrap  fwd        `cmd:"" passthrough:"" help:"Re-encrypt every envelope from CHALUPA_INGEST_MASTER_KEY to CHALUPA_INGEST_MASTER_KEY_NEW (daemon stopped)."`
}

// newServerCommands is serverCommands forwarding through f.
func newServerCommands(f *Forwarder) *serverCommands {
	c := fwd{f: f}
	return &serverCommands{Serve: c, Migrate: migrateFwd{c, c, c}, Config: configFwd{c, c}, Rewrap: c}
}

// migrateFwd is `migrate`'s subcommands, forwarded.
type migrateFwd struct {
	Status        fwd `cmd:"" passthrough:"" help:"List applied and pending migrations of the database in CHALUPA_DATA_DIR."`
	RestorePoints fwd `cmd:"" passthrough:"" name:"restore-points" help:"List the restore points taken before migrations, newest first, each integrity-checked."`
	Rollback      fwd `cmd:"" passthrough:"" help:"Replace the database with a restore point (daemon stopped): says what is lost, asks for a typed confirmation, moves the current database aside."`
}

// configFwd is `config`'s subcommands, forwarded.
type configFwd struct {
	Check     fwd `cmd:"" passthrough:"" help:"Print the effective configuration (secrets redacted); exit 1 if serve would refuse it."`
	CloudInit fwd `cmd:"" passthrough:"" name:"cloud-init" help:"Print the agent install user data for a hand-made droplet, rendered from the configured agent release."`
}
