package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/chalupa-run/chalupa/cli"
)

var update = flag.Bool("update", false, "rewrite testdata/help.golden from this build")

// testEnv is an environment with none of the process's variables.
func testEnv(args ...string) (cli.Env, *bytes.Buffer) {
	var out bytes.Buffer
	return cli.Env{Args: args, LookupEnv: func(string) (string, bool) { return "", false },
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out}, &out
}

// TestHelpGolden: every command's --help, run in process, is
// testdata/help.golden byte for byte (first written from the binary as it
// was before the commands moved into cli/), so the CLI surface — commands,
// flags, help text, exit codes — cannot change unnoticed. -update rewrites it.
func TestHelpGolden(t *testing.T) {
	b := allHelp(t, run)
	if *update {
		if err := os.WriteFile("testdata/help.golden", []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkHelpGolden(t, b)
}

// checkHelpGolden fails t where got differs from testdata/help.golden.
func checkHelpGolden(t *testing.T, got string) {
	t.Helper()
	want, err := os.ReadFile("testdata/help.golden")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) && i < len(wl); i++ {
			if gl[i] != wl[i] {
				t.Fatalf("help differs from testdata/help.golden at line %d (-update accepts it):\ngot:  %q\nwant: %q", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("help differs from testdata/help.golden in length: %d lines, want %d (-update accepts it)", len(gl), len(wl))
	}
}

// allHelp is every command's --help, as runner (a whole command line in
// process) prints it, in the order of the full binary's command tree.
func allHelp(t *testing.T, runner func(cli.Env) int) string {
	t.Helper()
	env, _ := testEnv()
	parser, err := cli.NewParser(&env, wiring())
	if err != nil {
		t.Fatal(err)
	}
	var paths [][]string
	var walk func(n *kong.Node, path []string)
	walk = func(n *kong.Node, path []string) {
		paths = append(paths, path)
		for _, ch := range n.Children {
			walk(ch, append(append([]string(nil), path...), ch.Name))
		}
	}
	walk(parser.Model.Node, nil)
	var b strings.Builder
	for _, p := range paths {
		env, out := testEnv(append(p, "--help")...)
		code := runner(env)
		fmt.Fprintf(&b, "=== %s --help (exit %d)\n%s", strings.Join(append([]string{"chalupa"}, p...), " "), code, out)
	}
	return b.String()
}
