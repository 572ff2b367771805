package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

var update = flag.Bool("update", false, "rewrite testdata/help.golden")

func TestHelpGolden(t *testing.T) {
	var c cli
	parser, err := newParser(&c)
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
	bin := proctest.BuildBinary(t)
	var b strings.Builder
	for _, p := range paths {
		out, code := proctest.RunCommand(t, bin, "", nil, append(p, "--help")...)
		fmt.Fprintf(&b, "=== %s --help (exit %d)\n%s", strings.Join(append([]string{"chalupa"}, p...), " "), code, out)
	}
	if *update {
		if err := os.WriteFile("testdata/help.golden", []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/help.golden")
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("help differs from testdata/help.golden (run with -update to accept)")
	}
}
