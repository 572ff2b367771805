package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/mcpserver"
)

// TestMCPEndToEnd runs `chalupa mcp` from the built binary against a
// running daemon, driven by the SDK's client over the command's standard
// input and output: it lists one tool per exposed operation, a read tool
// answers from the daemon, a destructive tool without its phrase is
// refused, and the admin token never appears in what the server says.
func TestMCPEndToEnd(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	ctx := context.Background()
	if _, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo-harbor"}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "mcp")
	cmd.Env = append(os.Environ(), "CHALUPA_URL="+d.URL, "CHALUPA_ADMIN_TOKEN="+d.AdminToken())
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// One tool per exposed operation, and each former name kept as an
	// alias for one release (docs/operations.md, "MCP server").
	want := len(mcpserver.Tools(adminapi.Operations))
	for _, op := range adminapi.Operations {
		want += len(op.MCP.Aliases)
	}
	if len(tools.Tools) != want {
		t.Errorf("%d tools; want %d", len(tools.Tools), want)
	}
	for _, tl := range tools.Tools {
		if tl.Name == "chalupa_admin_get_log_download" {
			t.Errorf("the download grant's tool is listed: a presigned URL is a credential")
		}
	}
	text := func(r *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "chalupa_admin_list_fleet"})
	if err != nil || res.IsError || !strings.Contains(text(res), `"demo-harbor"`) {
		t.Fatalf("list fleet: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "chalupa_admin_erase_telemetry",
		Arguments: map[string]any{"environmentSlug": "demo-harbor", "confirmation": "erase telemetry demo-harbor"}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "refused") {
		t.Fatalf("erase without confirm: %v %s", err, text(res))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "chalupa_admin_erase_telemetry",
		Arguments: map[string]any{"environmentSlug": "demo-harbor", "confirm": "erase telemetry demo-harbor"}})
	if err != nil || res.IsError {
		t.Fatalf("erase with confirm: %v %s", err, text(res))
	}
	if strings.Contains(text(res), d.AdminToken()) {
		t.Errorf("the admin token appears in a tool result")
	}
}

// TestOpenAPIEndToEnd: `chalupa admin api --openapi` prints, without a
// daemon, the document the running daemon serves, and refuses to be
// combined with an operation.
func TestOpenAPIEndToEnd(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	out, code := proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_URL": "http://127.0.0.1:1"}, "admin", "api", "--openapi")
	if code != 0 {
		t.Fatalf("--openapi exited %d: %s", code, out)
	}
	var printed map[string]any
	if err := json.Unmarshal([]byte(out), &printed); err != nil || printed["openapi"] != "3.1.0" {
		t.Fatalf("--openapi printed no 3.1 document: %v", err)
	}
	d := proctest.StartDaemon(t, bin, nil)
	resp, err := d.Do(context.Background(), http.MethodGet, daemon.OpenAPIPath, proctest.Bearer(d.AdminToken()), nil)
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("GET %s: %v %+v", daemon.OpenAPIPath, err, resp)
	}
	var servedDoc map[string]any
	if err := json.Unmarshal(resp.Body, &servedDoc); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(printed)
	b, _ := json.Marshal(servedDoc)
	if string(a) != string(b) {
		t.Errorf("the printed document differs from the served one")
	}
	if out, code := proctest.RunCommand(t, bin, "", nil, "admin", "api", "--openapi", "adminGetStatus"); code != 2 {
		t.Errorf("--openapi with an operation exited %d; want 2: %s", code, out)
	}
}

// TestMCPInspector runs the pinned MCP inspector's CLI (`mcp-inspector
// --cli`, contrib/tools/npm) against `chalupa mcp` from the built binary
// with a daemon behind it (docs/operations.md, "MCP server"): tools/list
// lists every tool with a title; a read tool answers from the daemon with
// structuredContent; a destructive tool without its phrase is refused as a
// tool error in the input schema's words; and with a malformed line ahead of the
// inspector's own frames (the inspector sends only well-formed ones) the
// session still serves tools/list; the inspector's schema portability check
// (--strict) finds nothing in any tool's schemas. Skips outside CI when the inspector is
// not installed, fails under CI=true.
func TestMCPInspector(t *testing.T) {
	t.Parallel()
	inspector := proctest.ToolPath(t, "mcp-inspector")
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	ctx := context.Background()
	if _, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo-harbor"}); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	run := func(t *testing.T, server []string, args ...string) (string, error) {
		t.Helper()
		argv := append([]string{"--cli", "-e", "CHALUPA_URL=" + d.URL, "-e", "CHALUPA_ADMIN_TOKEN=" + d.AdminToken()}, server...)
		cmd := exec.Command(inspector, append(argv, args...)...)
		// The inspector's catalog and npm's cache stay in the test's home.
		cmd.Env = append(os.Environ(), "HOME="+home, "MCP_CATALOG_PATH="+home+"/mcp.json")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	direct := []string{bin, "mcp"}
	for _, tc := range []struct {
		name   string
		server []string
		args   []string
		ok     bool
		want   []string
	}{
		{"tools/list", direct, []string{"--method", "tools/list"}, true,
			[]string{`"name": "chalupa_admin_list_fleet"`, `"title": "Fleet overview"`, `"outputSchema"`, `"readOnlyHint": true`}},
		{"read tool", direct, []string{"--method", "tools/call", "--tool-name", "chalupa_admin_list_fleet"}, true,
			[]string{`"structuredContent"`, `"demo-harbor"`}},
		{"refused destructive tool", direct, []string{"--method", "tools/call", "--tool-name", "chalupa_admin_erase_telemetry", "--tool-arg", "environmentSlug=demo-harbor"}, false,
			[]string{`"isError": true`, `missing properties: [\"confirm\"]`}},
		{"malformed frame", []string{"/bin/sh", "-c", `{ printf '{this is not json\n'; cat; } | "$0" mcp`, bin}, []string{"--method", "tools/list"}, true,
			[]string{`"name": "chalupa_admin_list_fleet"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, tc.server, tc.args...)
			if (err == nil) != tc.ok {
				t.Fatalf("inspector exit: %v; want success %v:\n%s", err, tc.ok, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("inspector output lacks %s:\n%.3000s", w, out)
				}
			}
			if strings.Contains(out, d.AdminToken()) {
				t.Errorf("the admin token appears in what the server said")
			}
		})
	}
	t.Run("portable schemas", func(t *testing.T) {
		// With --format json --strict the inspector's answer carries
		// schemaFindings when its portability check finds anything (a
		// type array such as ["string","null"], a schema without any
		// keyword), and nothing is printed otherwise (docs/operations.md,
		// "MCP server").
		out, err := run(t, direct, "--method", "tools/list", "--format", "json", "--strict")
		if err != nil {
			t.Fatalf("inspector exit: %v:\n%.3000s", err, out)
		}
		var answer struct {
			Result struct {
				Tools []json.RawMessage `json:"tools"`
			} `json:"result"`
			SchemaFindings []map[string]any `json:"schemaFindings"`
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &answer) == nil && len(answer.Result.Tools) > 0 {
				break
			}
		}
		if len(answer.Result.Tools) == 0 {
			t.Fatalf("no tools/list answer in the inspector's output:\n%.3000s", out)
		}
		for _, f := range answer.SchemaFindings {
			t.Errorf("portability finding: %v", f)
		}
	})
}
