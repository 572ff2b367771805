package mcpserver_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/mcpserver"
)

// session starts a daemon in process and the MCP server on its admin
// client, and connects the SDK's own client over an in-memory transport.
func session(t *testing.T) (*mcp.ClientSession, *daemontest.InProcess) {
	t.Helper()
	d := daemontest.NewInProcess(t, daemontest.AppOptions{})
	return serve(t, d.Admin), d
}

// serve runs the MCP server on admin, the daemon's client, and connects
// the SDK's own client to it over an in-memory transport; both close at
// cleanup.
func serve(t *testing.T, admin *adminapi.Client) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(admin, "test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its result and text.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool %s: %v", name, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return res, text.String()
}

// TestToolList: the tools listed are exactly the operations whose policy
// is not never, with their names, read-only and destructive annotations,
// and a required confirm on the destructive ones; no never operation has
// a tool.
func TestToolList(t *testing.T) {
	cs, _ := session(t)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		got[tl.Name] = tl
	}
	want := 0
	for _, op := range adminapi.Operations {
		name := mcpserver.ToolName(op)
		t.Run(op.ID, func(t *testing.T) {
			tl, listed := got[name]
			if op.MCP.Access == adminapi.MCPNever {
				if listed {
					t.Errorf("%s is never exposed but tool %s is listed", op.ID, name)
				}
				return
			}
			if !listed {
				t.Fatalf("tool %s (%s) is not listed", name, op.ID)
			}
			if tl.Annotations == nil || tl.Annotations.ReadOnlyHint != (op.MCP.Access == adminapi.MCPRead) {
				t.Errorf("readOnlyHint: %+v, policy %s", tl.Annotations, op.MCP.Access)
			}
			hint := tl.Annotations != nil && tl.Annotations.DestructiveHint != nil && *tl.Annotations.DestructiveHint
			destructive := op.MCP.Access == adminapi.MCPDestructive
			if hint != (destructive || op.MCP.Destroys) {
				t.Errorf("destructiveHint %v, policy %s, destroys %v", hint, op.MCP.Access, op.MCP.Destroys)
			}
			for _, alias := range op.MCP.Aliases {
				if a, ok := got[alias]; !ok || !strings.Contains(a.Description, "Deprecated alias of "+name) {
					t.Errorf("alias %s: listed %v, description %+v", alias, ok, a)
				}
			}
			schema, _ := json.Marshal(tl.InputSchema)
			var s struct {
				Required []string `json:"required"`
			}
			_ = json.Unmarshal(schema, &s)
			if always := destructive && len(op.MCP.ConfirmActions) == 0; slices.Contains(s.Required, mcpserver.ConfirmArg) != always {
				t.Errorf("confirm required %v, destructive %v, asked only for %q: %s", slices.Contains(s.Required, mcpserver.ConfirmArg), destructive, op.MCP.ConfirmActions, schema)
			}
			if strings.Count(tl.Description, op.ID) != 1 || !strings.HasSuffix(tl.Description, " operationId "+op.ID+".") {
				t.Errorf("description %q does not end with its operationId, once", tl.Description)
			}
		})
		if op.MCP.Access != adminapi.MCPNever {
			want += 1 + len(op.MCP.Aliases)
		}
	}
	if len(res.Tools) != want {
		t.Errorf("%d tools listed; want %d (one per exposed operation)", len(res.Tools), want)
	}
}

// TestToolNames: tool names read alike: an initialism is one word, the
// reaper tick is annotated as able to destroy, and an erase asks for its
// phrase once, in confirm (docs/operations.md, "MCP server").
func TestToolNames(t *testing.T) {
	for id, want := range map[string]string{
		adminapi.OpGetSSHKey:      "chalupa_admin_get_ssh_key",
		adminapi.OpListFleet:      "chalupa_admin_list_fleet",
		adminapi.OpEraseTelemetry: "chalupa_admin_erase_telemetry",
	} {
		t.Run(id, func(t *testing.T) {
			op, _ := adminapi.Lookup(id)
			if got := mcpserver.ToolName(op); got != want {
				t.Fatalf("ToolName = %s, want %s", got, want)
			}
		})
	}
	cs, _ := session(t)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		tools[tl.Name] = tl
	}
	if tl := tools["chalupa_admin_run_reaper_tick"]; tl == nil || tl.Annotations.DestructiveHint == nil || !*tl.Annotations.DestructiveHint {
		t.Errorf("the reaper tick is not annotated destructive: %+v", tl)
	}
	for _, name := range []string{"chalupa_admin_erase_telemetry", "chalupa_admin_erase_logs"} {
		schema, _ := json.Marshal(tools[name].InputSchema)
		if strings.Contains(string(schema), `"confirmation"`) || !strings.Contains(string(schema), `"confirm"`) {
			t.Errorf("%s asks for its phrase more than once: %s", name, schema)
		}
	}
}

// TestReadTools: read tools answer with the daemon's JSON, query and path
// parameters included; an unknown argument is refused.
func TestReadTools(t *testing.T) {
	cs, d := session(t)
	ctx := context.Background()
	if _, err := d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo-harbor"}); err != nil {
		t.Fatal(err)
	}
	t.Run("status", func(t *testing.T) {
		res, text := call(t, cs, "chalupa_admin_get_status", nil)
		var st adminapi.Status
		if res.IsError || json.Unmarshal([]byte(text), &st) != nil || st.SchemaVersion == 0 {
			t.Fatalf("status: error %v, %s", res.IsError, text)
		}
	})
	t.Run("environments", func(t *testing.T) {
		res, text := call(t, cs, "chalupa_admin_list_environments", map[string]any{})
		if res.IsError || !strings.Contains(text, `"demo-harbor"`) {
			t.Fatalf("list environments: error %v, %s", res.IsError, text)
		}
	})
	t.Run("path parameter", func(t *testing.T) {
		res, text := call(t, cs, "chalupa_admin_list_runs", map[string]any{"slug": "demo-harbor"})
		if res.IsError || !strings.Contains(text, `"runs"`) {
			t.Fatalf("list runs: error %v, %s", res.IsError, text)
		}
		res, text = call(t, cs, "chalupa_admin_list_runs", map[string]any{"slug": "no-such-env"})
		if !res.IsError || !strings.Contains(text, "404") {
			t.Fatalf("list runs of an unknown environment: error %v, %s", res.IsError, text)
		}
	})
	t.Run("query parameter", func(t *testing.T) {
		res, text := call(t, cs, "chalupa_admin_list_jobs", map[string]any{"limit": 5})
		if res.IsError {
			t.Fatalf("list jobs: %s", text)
		}
	})
	t.Run("unknown argument", func(t *testing.T) {
		res, text := call(t, cs, "chalupa_admin_get_status", map[string]any{"verbose": true})
		if !res.IsError || !strings.Contains(text, `unexpected additional properties ["verbose"]`) {
			t.Fatalf("unknown argument: error %v, %s", res.IsError, text)
		}
	})
	t.Run("mutate", func(t *testing.T) {
		res, text := call(t, cs, "chalupa_admin_create_environment", map[string]any{"slug": "from-mcp"})
		if res.IsError || !strings.Contains(text, `"from-mcp"`) {
			t.Fatalf("create environment: error %v, %s", res.IsError, text)
		}
		res, text = call(t, cs, "chalupa_admin_create_environment", map[string]any{"slug": 7})
		if !res.IsError {
			t.Fatalf("a number for a string field was taken: %s", text)
		}
	})
}

// TestDestructiveNeedsConfirmation: a destructive tool called without
// confirm, or with a phrase that is not exactly the one its arguments
// form, is refused and the daemon is not called (the key stays active,
// no job is queued); the exact phrase goes through.
func TestDestructiveNeedsConfirmation(t *testing.T) {
	cs, d := session(t)
	ctx := context.Background()
	if _, err := d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo-harbor"}); err != nil {
		t.Fatal(err)
	}
	key, err := d.Admin.IssueIngestKey(ctx, "demo-harbor")
	if err != nil {
		t.Fatal(err)
	}
	activeKeys := func() int {
		f, err := d.Admin.ListFleet(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return f.Environments[0].Keys["active"]
	}
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"without confirm", map[string]any{"keyId": key.KeyID}},
		{"empty confirm", map[string]any{"keyId": key.KeyID, "confirm": ""}},
		{"wrong key", map[string]any{"keyId": key.KeyID, "confirm": "revoke key someone-else"}},
		{"template as is", map[string]any{"keyId": key.KeyID, "confirm": "revoke key {keyId}"}},
		{"case differs", map[string]any{"keyId": key.KeyID, "confirm": "Revoke key " + key.KeyID}},
		{"not a string", map[string]any{"keyId": key.KeyID, "confirm": 1}},
		{"no key to name", map[string]any{"confirm": "revoke key "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, text := call(t, cs, "chalupa_admin_revoke_ingest_key", tc.args)
			if !res.IsError || !strings.Contains(text, "refused") {
				t.Fatalf("not refused: %s", text)
			}
			if n := activeKeys(); n != 1 {
				t.Fatalf("active keys %d after a refused call; want 1", n)
			}
		})
	}
	t.Run("converge without confirm", func(t *testing.T) {
		res, text := call(t, cs, "chalupa_admin_pulumi_converge", map[string]any{"scope": map[string]any{"kind": "box", "id": "web-1"}, "action": "destroy"})
		if !res.IsError || !strings.Contains(text, "refused") {
			t.Fatalf("not refused: %s", text)
		}
		res, text = call(t, cs, "chalupa_admin_pulumi_converge", map[string]any{"scope": map[string]any{"kind": "box", "id": "web-1"}, "action": "destroy", "confirm": "destroy web-2"})
		if !res.IsError || !strings.Contains(text, "refused") {
			t.Fatalf("not refused: %s", text)
		}
		jobs, err := d.Admin.ListJobs(ctx, adminapi.ListJobsRequest{})
		if err != nil || len(jobs.Jobs) != 0 {
			t.Fatalf("jobs after refused calls: %+v, %v", jobs.Jobs, err)
		}
	})
	t.Run("exact phrase", func(t *testing.T) {
		res, text := call(t, cs, "chalupa_admin_revoke_ingest_key", map[string]any{"keyId": key.KeyID, "confirm": "revoke key " + key.KeyID})
		if res.IsError || !strings.Contains(text, `"revoked"`) {
			t.Fatalf("revoke with the phrase: error %v, %s", res.IsError, text)
		}
		if n := activeKeys(); n != 0 {
			t.Fatalf("active keys %d after revoking; want 0", n)
		}
	})
}

// TestNeverUnreachable: calling a never operation by its would-be tool
// name is an unknown tool, and no listed tool calls one.
func TestNeverUnreachable(t *testing.T) {
	cs, _ := session(t)
	for _, op := range adminapi.Operations {
		if op.MCP.Access != adminapi.MCPNever {
			continue
		}
		t.Run(op.ID, func(t *testing.T) {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolName(op), Arguments: map[string]any{}})
			if err == nil && !res.IsError {
				t.Fatalf("never operation %s answered through tool %s", op.ID, mcpserver.ToolName(op))
			}
		})
	}
	for _, tl := range mcpserver.Tools(adminapi.Operations) {
		if tl.Op.MCP.Access == adminapi.MCPNever {
			t.Errorf("tool %s calls never operation %s", tl.Name, tl.Op.ID)
		}
	}
}
