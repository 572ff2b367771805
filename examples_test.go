package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/chalupa-run/chalupa/cli"
)

// exampleCommands are the commands whose --help carries examples (the most
// used ones, by the README's first session and docs/operations.md).
var exampleCommands = []string{
	"serve", "config cloud-init", "admin status", "admin environment list", "admin environment create",
	"admin fleet", "admin keys", "admin report", "admin logs", "admin converge", "mcp", "completion",
}

// TestHelpExamplesParse: each command of exampleCommands has an Examples
// block in its --help, and every chalupa line of every Examples block in
// the tree parses as written (leading VAR=value assignments, a redirection
// and the explanation after three spaces left out): an example cannot name
// a flag or subcommand that does not exist.
func TestHelpExamplesParse(t *testing.T) {
	env, _ := testEnv()
	parser, err := cli.NewParser(&env, wiring())
	if err != nil {
		t.Fatal(err)
	}
	withExamples := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		if _, block, ok := strings.Cut(n.Detail, "Examples:\n"); ok {
			path := nodePath(n)
			withExamples[path] = true
			for _, line := range strings.Split(block, "\n") {
				vars, args, ok := exampleArgs(line)
				if !ok {
					continue
				}
				t.Run(strings.Join(args, " "), func(t *testing.T) {
					env, _ := testEnv()
					env.LookupEnv = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
					p, err := cli.NewParser(&env, wiring())
					if err != nil {
						t.Fatal(err)
					}
					if _, err := p.Parse(args); err != nil {
						t.Fatalf("the example %q of %q does not parse: %v", line, path, err)
					}
				})
			}
		}
		for _, ch := range n.Children {
			walk(ch)
		}
	}
	walk(parser.Model.Node)
	for _, c := range exampleCommands {
		if !withExamples[c] {
			t.Errorf("chalupa %s --help has no Examples block", c)
		}
	}
}

// nodePath is "admin environment list" for n, by the commands' names.
func nodePath(n *kong.Node) string {
	var names []string
	for ; n != nil && n.Parent != nil; n = n.Parent {
		names = append([]string{n.Name}, names...)
	}
	return strings.Join(names, " ")
}

// explanation is the gap before an example's explanation.
var explanation = regexp.MustCompile(`\s{3,}`)

// exampleArgs is an example line's leading VAR=value assignments and its
// arguments after "chalupa", split as sh would split the words (single and
// double quotes; "$(…)" kept as one word), or false for a line that runs no
// chalupa command.
func exampleArgs(line string) (map[string]string, []string, bool) {
	line = explanation.Split(strings.TrimSpace(line), 2)[0]
	var words []string
	var cur strings.Builder
	inWord := false
	quote := rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	vars := map[string]string{}
	for len(words) > 0 && strings.Contains(words[0], "=") {
		k, v, _ := strings.Cut(words[0], "=")
		vars[k] = v
		words = words[1:]
	}
	if len(words) == 0 || words[0] != "chalupa" {
		return nil, nil, false
	}
	words = words[1:]
	for i, w := range words {
		if strings.HasPrefix(w, ">") {
			words = words[:i]
			break
		}
	}
	return vars, words, true
}
