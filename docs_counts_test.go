package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/mcpserver"
)

// TestDocsCounts: the counts docs/operations.md states — operations and
// MCP tools ("MCP server"), OpenAPI paths and operations ("OpenAPI") —
// are the operation table's, so they cannot drift from it by hand.
func TestDocsCounts(t *testing.T) {
	raw, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	ops := adminapi.Operations
	tools := mcpserver.Tools(ops)
	aliases := 0
	for _, op := range ops {
		aliases += len(op.MCP.Aliases)
	}
	doc, err := daemon.OpenAPI("test")
	if err != nil {
		t.Fatal(err)
	}
	var api struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &api); err != nil {
		t.Fatal(err)
	}
	apiOps := 0
	for _, item := range api.Paths {
		for method := range item {
			switch strings.ToLower(method) {
			case "get", "put", "post", "delete", "patch", "head", "options":
				apiOps++
			}
		}
	}
	for _, tc := range []struct {
		name    string
		pattern string
		want    []int
	}{
		{"MCP server", `(\d+) tools of (\d+) operations \(and (\d+) former names? answered as (?:an )?alias(?:es)?\)`, []int{len(tools), len(ops), aliases}},
		{"OpenAPI", `Size: (\d+) paths, (\d+) operations`, []int{len(api.Paths), apiOps}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := regexp.MustCompile(tc.pattern).FindStringSubmatch(string(raw))
			if m == nil {
				t.Fatalf("docs/operations.md has no %q", tc.pattern)
			}
			for i, w := range tc.want {
				if got, _ := strconv.Atoi(m[i+1]); got != w {
					t.Errorf("docs/operations.md says %q; the table gives %v", m[0], tc.want)
					break
				}
			}
		})
	}
}

// TestReadmeConfigTable: README.md's configuration table lists every
// variable `chalupa config check` prints (the daemon's whole
// configuration, converge's and the agent release's included).
func TestReadmeConfigTable(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start, end := strings.Index(readme, "\n## Configuration"), strings.Index(readme, "\n## HTTP surface")
	if start < 0 || end < start {
		t.Fatal("README.md has no Configuration section before HTTP surface")
	}
	table := readme[start:end]
	cfg, err := daemon.LoadConfig(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	rows := cfg.Redacted()
	if len(rows) < 30 {
		t.Fatalf("config check prints %d rows: the walk no longer sees the configuration", len(rows))
	}
	for _, r := range rows {
		if !strings.Contains(table, "`"+r[0]+"`") {
			t.Errorf("README.md's configuration table does not list %s", r[0])
		}
	}
}
