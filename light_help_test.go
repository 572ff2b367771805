package main

import (
	"testing"

	"github.com/chalupa-run/chalupa/cli"
	"github.com/chalupa-run/chalupa/cli/light"
)

// TestLightHelpGolden: the light binary (cmd/chalupa) shows the same
// command tree and help as the full one, testdata/help.golden byte for
// byte: its own commands' help is its own, the server commands' is
// chalupad's, to which they forward their --help (here the full binary's
// run, in process, on the same streams). A server command added to
// cli/servercmd and not to cli/light fails here (docs/operations.md,
// "Releases").
func TestLightHelpGolden(t *testing.T) {
	checkHelpGolden(t, allHelp(t, func(env cli.Env) int {
		f := &light.Forwarder{
			Executable: func() (string, error) { return "", nil },
			LookPath:   func(string) (string, error) { return "/bin/sh", nil }, // any executable stands for chalupad
			Exec: func(_ string, args []string) error {
				forwarded := env
				forwarded.Args = args
				return cli.Exit(run(forwarded), nil)
			},
		}
		return cli.Run(env, light.Wiring(f))
	}))
}
