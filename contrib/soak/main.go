// Command soak runs the long-running measurements of a chalupa daemon that an
// operator of a one-vCPU droplet needs, each against the real binary with a
// real SQLite file in a temporary data directory, on loopback only. See
// README.md beside this file.
//
//	go run ./contrib/soak idle        [-minutes 10]  wake-ups and CPU of an idle daemon
//	go run ./contrib/soak storm       [-duration 60s] WAL size during and after a write storm
//	go run ./contrib/soak longreader  [-hold 60s]    WAL growth while a read transaction is held
//	go run ./contrib/soak slowclients [-conns 5000]  memory per idle keep-alive connection
//	go run ./contrib/soak alertidle   [-rounds 3]    idle wake-ups, alerts configured against alerts off
//	go run ./contrib/soak alertlatency [-samples 40] a condition's start to the webhook receiver
//
// Each builds chalupa (CGO_ENABLED=0 go build -o tmp/chalupa .) unless
// given -chalupa-bin, starts `chalupa serve` with the embedded default (the
// file:// replica in the data dir) and generated secrets, measures, and stops
// it. Every loop is bounded in time and count; Ctrl-C stops cleanly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
)

// tools are the subcommands, with one line each for the usage message.
var tools = []struct {
	name, what string
	run        func(args []string) error
}{
	{"idle", "context switches, CPU and timer wake-ups of an idle daemon, per minute", runIdle},
	{"storm", "WAL size every 100 ms during a 60 s signed-heartbeat storm and after", runStorm},
	{"longreader", "WAL growth while a second connection holds a read transaction during steady writes", runLongReader},
	{"slowclients", "RSS per idle keep-alive connection, and how many connections are accepted", runSlowClients},
	{"alertidle", "idle wake-ups with alerts configured and none open against alerts off, interleaved", runAlertIdle},
	{"alertlatency", "time from a condition's start to the webhook receiver (p50, p95)", runAlertLatency},
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: go run ./contrib/soak TOOL [flags]   (TOOL -h lists its flags)")
	for _, t := range tools {
		fmt.Fprintf(os.Stderr, "  %-12s %s\n", t.name, t.what)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	for _, t := range tools {
		if t.name == os.Args[1] {
			err := t.run(os.Args[2:])
			if errors.Is(err, flag.ErrHelp) {
				os.Exit(0)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "soak %s: %v\n", t.name, err)
				os.Exit(1)
			}
			return
		}
	}
	usage()
	os.Exit(2)
}

func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", a...)
}

// common are the flags every tool has: which binary, where it runs, and
// what it is given.
type common struct {
	bin        string
	keep       bool
	serverCPUs string
	env        envFlag
	args       argFlag
	cpus       []int
}

// envFlag collects repeated -env KEY=VALUE.
type envFlag []string

// String is the flag's value as text.
func (e *envFlag) String() string { return strings.Join(*e, " ") }

// Set adds one KEY=VALUE.
func (e *envFlag) Set(v string) error {
	k, _, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return errors.New("want KEY=VALUE")
	}
	*e = append(*e, v)
	return nil
}

// argFlag collects repeated -serve-arg.
type argFlag []string

// String is the flag's value as text.
func (a *argFlag) String() string { return strings.Join(*a, " ") }

// Set adds one argument.
func (a *argFlag) Set(v string) error {
	if v == "" {
		return errors.New("empty argument")
	}
	*a = append(*a, v)
	return nil
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.bin, "chalupa-bin", "", "use this chalupa binary instead of building tmp/chalupa")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory (database, WAL, log)")
	fs.StringVar(&c.serverCPUs, "server-cpus", "", "run chalupa under `taskset -c LIST` (e.g. 0)")
	fs.Var(&c.env, "env", "add KEY=VALUE to chalupa's environment (repeatable)")
	fs.Var(&c.args, "serve-arg", "add an argument to `chalupa serve` (repeatable), e.g. -serve-arg=--max-connections=1000")
}

// parse parses args into fs and checks the common flags.
func (c *common) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cpus, err := harness.ParseCPUList(c.serverCPUs)
	if err != nil {
		return fmt.Errorf("-server-cpus: %w", err)
	}
	c.cpus = cpus
	if c.bin != "" {
		// chalupa runs in its own directory: a relative path would not
		// resolve there.
		if c.bin, err = filepath.Abs(c.bin); err != nil {
			return err
		}
	}
	return nil
}

// runContext bounds a tool's whole run by limit, and ends it on SIGINT or
// SIGTERM.
func runContext(limit time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	return ctx, func() { stop(); cancel() }
}

// session is a running chalupa in a temporary directory.
type session struct {
	*harness.Chalupa
	dir  string
	keep bool
}

// start builds chalupa if needed and starts it in a new temporary
// directory; close stops it and removes the directory (unless -keep).
func (c *common) start(ctx context.Context, tool string) (*session, error) {
	bin := c.bin
	if bin == "" {
		root, err := harness.FindRepoRoot()
		if err != nil {
			return nil, err
		}
		progress("building %s", filepath.Join(root, "tmp", "chalupa"))
		if bin, err = harness.BuildChalupa(ctx, root); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "chalupa-soak-"+tool+"-")
	if err != nil {
		return nil, err
	}
	where := ""
	if len(c.cpus) > 0 {
		where = " under taskset -c " + harness.FormatCPUList(c.cpus)
	}
	// The quotas it runs with: every one unlimited, unless -env set one.
	quotas := append([]string(nil), harness.BenchmarkQuotaEnv...)
	for _, kv := range c.env {
		if strings.HasPrefix(kv, "CHALUPA_QUOTA_") {
			quotas = append(quotas, kv)
		}
	}
	progress("starting %s serve%s%s in %s, with %s", bin, strings.Join(append([]string{""}, c.args...), " "), where, dir, strings.Join(quotas, " "))
	ch, err := harness.StartChalupa(ctx, bin, dir, harness.StartOptions{CPUs: c.cpus, Args: c.args, Env: c.env})
	if err != nil {
		if !c.keep {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	return &session{Chalupa: ch, dir: dir, keep: c.keep}, nil
}

func (s *session) close() {
	progress("stopping chalupa")
	if err := s.Stop(harness.ChalupaStopGrace); err != nil {
		progress("%v", err)
	}
	if s.keep {
		progress("kept %s (chalupa.log, chalupa-data/)", s.dir)
		return
	}
	os.RemoveAll(s.dir)
}

// placement describes -server-cpus for a report header.
func placement(cpus []int) string {
	if len(cpus) == 0 {
		return ""
	}
	return " under taskset -c " + harness.FormatCPUList(cpus)
}
