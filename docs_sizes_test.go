package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/mcpserver"
)

// docsSizeTolerance is how far (a fraction) a byte size docs/operations.md
// states may be from the one measured: the docs round ("about"), and a
// reworded summary must not fail the build, while a figure left behind by
// a grown or shrunk surface does.
const docsSizeTolerance = 0.05

// TestDocsSizes: the byte sizes docs/operations.md states for the MCP
// server's `tools/list` ("MCP server": the tools' input schemas in all and
// the smallest and largest, their descriptions in all, the whole answer)
// and the OpenAPI document ("OpenAPI") are measured here, from the server
// and the document the binary builds, and must be within
// docsSizeTolerance of the docs. `go test -run TestDocsSizes -v .` prints
// the measured figures.
func TestDocsSizes(t *testing.T) {
	raw, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(raw)), " ") // the docs wrap lines anywhere

	// tools/list as a client receives it: the SDK's own client over an
	// in-memory transport (no daemon: listing calls nothing).
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(&adminapi.Client{}, "test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "docs-sizes", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	result, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	// The answer on the wire: the JSON-RPC envelope around the result.
	answer := len(`{"jsonrpc":"2.0","id":1,"result":}`) + len(result)
	schemas, minSchema, maxSchema, descriptions := 0, math.MaxInt, 0, 0
	for _, tool := range list.Tools {
		b, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		schemas += len(b)
		minSchema, maxSchema = min(minSchema, len(b)), max(maxSchema, len(b))
		descriptions += len(tool.Description)
	}
	api, err := daemon.OpenAPI("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tools/list: %d tools listed; input schemas %s bytes in all, %d to %d bytes each; descriptions %s bytes in all; the whole answer %s bytes (%.1f KB); OpenAPI %s bytes",
		len(list.Tools), thousands(schemas), minSchema, maxSchema, thousands(descriptions), thousands(answer), float64(answer)/1000, thousands(len(api)))

	for _, tc := range []struct {
		name    string
		pattern string
		scale   []float64 // bytes per unit of each group
		want    []int
	}{
		{"MCP server", "input schemas ([0-9,]+) bytes in all, ([0-9,]+) to ([0-9,]+) bytes each; descriptions ([0-9,]+) bytes in all; the whole `tools/list` answer about ([0-9.]+) KB",
			[]float64{1, 1, 1, 1, 1000}, []int{schemas, minSchema, maxSchema, descriptions, answer}},
		{"OpenAPI", `Size: \d+ paths, \d+ operations, \d+ security schemes, ([0-9,]+) bytes`, []float64{1}, []int{len(api)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := regexp.MustCompile(tc.pattern).FindStringSubmatch(doc)
			if m == nil {
				t.Fatalf("docs/operations.md has no %q", tc.pattern)
			}
			for i, w := range tc.want {
				stated, err := strconv.ParseFloat(strings.ReplaceAll(m[i+1], ",", ""), 64)
				if err != nil {
					t.Fatalf("%q: %v", m[0], err)
				}
				if got := stated * tc.scale[i]; math.Abs(got-float64(w)) > docsSizeTolerance*float64(w) {
					t.Errorf("docs/operations.md says %q: %s is %.0f bytes, measured %d (more than %.0f%% apart)", m[0], m[i+1], got, w, 100*docsSizeTolerance)
				}
			}
		})
	}
}

// thousands writes n with a comma every three digits, as the docs do.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
