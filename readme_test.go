package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/cli"
)

// TestReadmeSymptomTable: the README carries the converge runbook's
// "symptom → first action" table, and every chalupa command in it parses
// as written (the placeholder ID aside), so an operator can paste it.
func TestReadmeSymptomTable(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start := strings.Index(readme, "**Symptom → first action**")
	if start < 0 {
		t.Fatal("the README has no symptom → first action table")
	}
	// The table: from the heading to the first blank line after its rows.
	rows := strings.Index(readme[start:], "\n|")
	if rows < 0 {
		t.Fatal("the symptom heading has no table under it")
	}
	table := readme[start:]
	if end := strings.Index(table[rows:], "\n\n"); end >= 0 {
		table = table[:rows+end]
	}
	for _, symptom := range []string{"another update in progress", "drift", "dry-run"} {
		if !strings.Contains(table, symptom) {
			t.Errorf("the table has no row for %q", symptom)
		}
	}
	cmds := regexp.MustCompile("`(chalupa [^`]+)`").FindAllStringSubmatch(table, -1)
	if len(cmds) < 5 {
		t.Fatalf("found %d commands in the table: the pattern no longer matches it", len(cmds))
	}
	for _, m := range cmds {
		line := strings.ReplaceAll(m[1], " ID", " 01M8SG4T49P81016EQHS22CGDM")
		t.Run(line, func(t *testing.T) {
			args := strings.Fields(strings.ReplaceAll(line, "'wipe gpu-1'", "wipe-gpu-1"))[1:]
			env, _ := testEnv()
			p, err := cli.NewParser(&env, wiring())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Parse(args); err != nil {
				t.Errorf("%q does not parse: %v", line, err)
			}
		})
	}
}
