package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/mcpserver"
)

// recordingSession serves the tools on a client whose daemon is a
// recorder answering {} to everything, and returns the count of requests
// it received.
func recordingSession(t *testing.T) (*mcp.ClientSession, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(rec.Close)
	return serve(t, &adminapi.Client{BaseURL: rec.URL, Token: "test-token", HTTP: rec.Client()}), &n
}

// TestArgumentsCheckedAgainstSchema: a call whose arguments break the
// tool's input schema is refused with the schema's own words (the type,
// pattern, bound, enum or required rule) before anything is sent to the
// daemon; the same tool with valid arguments reaches it
// (docs/operations.md, "MCP server").
func TestArgumentsCheckedAgainstSchema(t *testing.T) {
	cs, sent := recordingSession(t)
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		want       string // the schema's words in the refusal; "" for a call that goes through
	}{
		{"limit as text", "chalupa_admin_list_jobs", map[string]any{"limit": "3"}, `/properties/limit: type: 3 has type "string", want "integer"`},
		{"limit as a word", "chalupa_admin_list_jobs", map[string]any{"limit": "ten"}, `/properties/limit: type: ten has type "string", want "integer"`},
		{"limit out of range", "chalupa_admin_list_jobs", map[string]any{"limit": 501}, `/properties/limit: maximum`},
		{"status not one of", "chalupa_admin_list_jobs", map[string]any{"status": "done"}, `/properties/status: enum`},
		{"limit as a number", "chalupa_admin_list_jobs", map[string]any{"limit": 3}, ""},
		{"limit as 3.0", "chalupa_admin_list_jobs", map[string]any{"limit": json.RawMessage(`3.0`)}, ""},
		{"seq as 1e3", "chalupa_admin_get_log_chunk", map[string]any{"slug": "ab", "id": "d", "session": "s", "seq": json.RawMessage(`1e3`)}, ""},
		{"seq not digits", "chalupa_admin_get_log_chunk", map[string]any{"slug": "ab", "id": "d", "session": "s", "seq": "abc"}, `/properties/seq/anyOf/1: pattern: "abc" does not match regular expression "^[0-9]+$"`},
		{"seq a fraction", "chalupa_admin_get_log_chunk", map[string]any{"slug": "ab", "id": "d", "session": "s", "seq": 1.5}, `/properties/seq/anyOf/0: type: 1.5 has type "number", want "integer"`},
		{"seq digits", "chalupa_admin_get_log_chunk", map[string]any{"slug": "ab", "id": "d", "session": "s", "seq": "12"}, ""},
		{"slug breaks its pattern", "chalupa_admin_get_log_chunk", map[string]any{"slug": "A", "id": "d", "session": "s", "seq": "1"}, `/properties/slug: pattern: "A" does not match regular expression "^[a-z0-9][a-z0-9-]{1,62}$"`},
		{"loop not in the set", "chalupa_admin_pause_loop", map[string]any{"name": "ingest"}, `/properties/name: enum`},
		{"environment without slug", "chalupa_admin_create_environment", map[string]any{"name": "Harbor"}, `required: missing properties: ["slug"]`},
		{"slug a number", "chalupa_admin_create_environment", map[string]any{"slug": 7}, `/properties/slug: type: 7 has type "integer", want "string"`},
		{"slug null", "chalupa_admin_create_environment", map[string]any{"slug": nil}, `/properties/slug: type: null given (leave out an argument without a value), want "string"`},
		{"organization without slug", "chalupa_admin_create_organization", map[string]any{}, `missing properties: ["slug"]`},
		{"box without its configuration", "chalupa_admin_create_box", map[string]any{"name": "web-1", "environment": "demo-harbor"},
			`missing properties: ["controlPlaneSource" "customerSource" "image" "region" "size" "sshKeyFingerprints"]`},
		{"box with a reserved tag", "chalupa_admin_create_box", boxArgs(map[string]any{"tags": []string{"ok", "Chalupa-x"}}), `/properties/tags/items: not`},
		{"box with a loopback source", "chalupa_admin_create_box", boxArgs(map[string]any{"customerSource": "127.0.0.1/32"}), `/properties/customerSource: not`},
		{"box with a repeated key", "chalupa_admin_create_box", boxArgs(map[string]any{"sshKeyFingerprints": []string{mcpKey, mcpKey}}), `/properties/sshKeyFingerprints: uniqueItems`},
		{"box", "chalupa_admin_create_box", boxArgs(nil), ""},
		{"box update with no keys", "chalupa_admin_update_box", map[string]any{"box": "web-1", "sshKeyFingerprints": []string{}}, `/properties/sshKeyFingerprints: minItems`},
		{"box update with idle 0", "chalupa_admin_update_box", map[string]any{"box": "web-1", "agentIdleMinutes": 0}, `/properties/agentIdleMinutes: minimum`},
		{"erase without environmentSlug", "chalupa_admin_erase_telemetry", map[string]any{"confirm": "erase telemetry "}, `missing properties: ["environmentSlug"]`},
		{"revoke without keyId", "chalupa_admin_revoke_ingest_key", map[string]any{"confirm": "revoke key "}, `missing properties: ["keyId"]`},
		{"revoke with environmentSlug", "chalupa_admin_revoke_ingest_key", map[string]any{"keyId": "k", "environmentSlug": "a", "confirm": "revoke key k"}, `unexpected additional properties ["environmentSlug"]`},
		{"converge without action", "chalupa_admin_pulumi_converge", map[string]any{"scope": map[string]any{"kind": "box", "id": "web-1"}, "confirm": " web-1"}, `missing properties: ["action"]`},
		{"converge without scope", "chalupa_admin_pulumi_converge", map[string]any{"action": "up", "confirm": "up "}, `missing properties: ["scope"]`},
		{"converge scope without id", "chalupa_admin_pulumi_converge", map[string]any{"action": "up", "scope": map[string]any{"kind": "box"}, "confirm": "up "}, `/properties/scope: required: missing properties: ["id"]`},
		{"converge unknown action", "chalupa_admin_pulumi_converge", map[string]any{"action": "apply", "scope": map[string]any{"kind": "box", "id": "web-1"}, "confirm": "apply web-1"}, `/properties/action: enum`},
		{"converge preview without confirm", "chalupa_admin_pulumi_converge", map[string]any{"action": "preview", "scope": map[string]any{"kind": "box", "id": "web-1"}}, ""},
		{"converge refresh without confirm", "chalupa_admin_pulumi_converge", map[string]any{"action": "refresh", "scope": map[string]any{"kind": "box", "id": "web-1"}}, ""},
		{"converge up without confirm", "chalupa_admin_pulumi_converge", map[string]any{"action": "up", "scope": map[string]any{"kind": "box", "id": "web-1"}}, `confirm must be exactly "{action} {scope.id}"`},
		{"converge destroy, another box's phrase", "chalupa_admin_pulumi_converge", map[string]any{"action": "destroy", "scope": map[string]any{"kind": "box", "id": "web-1"}, "confirm": "destroy web-2"}, `confirm must be exactly "{action} {scope.id}"`},
		{"converge up with its phrase", "chalupa_admin_pulumi_converge", map[string]any{"action": "up", "scope": map[string]any{"kind": "box", "id": "web-1"}, "confirm": "up web-1"}, ""},
		{"wipe without box", "chalupa_admin_pulumi_wipe_cache", map[string]any{"confirm": "wipe all"}, `missing properties: ["box"]`},
		{"session policy out of range", "chalupa_admin_set_session_policy", map[string]any{"slug": "ab", "kind": "demo", "maxSessionSeconds": 5}, `/properties/maxSessionSeconds: minimum`},
		{"unknown argument", "chalupa_admin_get_status", map[string]any{"verbose": true}, `unexpected additional properties ["verbose"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := sent.Load()
			res, text := call(t, cs, tc.tool, tc.args)
			if tc.want == "" {
				if res.IsError || sent.Load() != before+1 {
					t.Fatalf("valid arguments: error %v, %d requests sent; want 1: %s", res.IsError, sent.Load()-before, text)
				}
				return
			}
			if !res.IsError || !strings.Contains(text, tc.want) {
				t.Errorf("refusal %q (error %v) lacks the schema's words %q", text, res.IsError, tc.want)
			}
			if n := sent.Load() - before; n != 0 {
				t.Errorf("%d requests reached the daemon; want none", n)
			}
		})
	}
}

// mcpKey is a valid SSH key fingerprint.
const mcpKey = "00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff"

// boxArgs are valid create-box arguments with the keys of set replaced.
func boxArgs(set map[string]any) map[string]any {
	a := map[string]any{"name": "web-1", "environment": "demo-harbor", "region": "nyc3", "size": "s-1vcpu-1gb",
		"image": "ubuntu-24-04-x64", "sshKeyFingerprints": []string{mcpKey},
		"customerSource": "203.0.113.7/32", "controlPlaneSource": "198.51.100.7/32"}
	for k, v := range set {
		a[k] = v
	}
	return a
}

// TestToolDocs: every listed tool has a title, true annotations (a read is
// idempotent; destructive agrees with the policy), a description that ends
// with its operationId once and names no request field the schema lacks
// (an erase's confirmation is filled from confirm), every input property
// described in words of its own (not "path parameter"), and an output
// schema for its JSON object answer (docs/operations.md, "MCP server").
func TestToolDocs(t *testing.T) {
	cs, _ := recordingSession(t)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		byName[tl.Name] = tl
	}
	for _, tool := range mcpserver.Tools(adminapi.Operations) {
		t.Run(tool.Name, func(t *testing.T) {
			tl := byName[tool.Name]
			if tl == nil {
				t.Fatal("not listed")
			}
			if tl.Title == "" {
				t.Error("no title")
			}
			a := tl.Annotations
			if a == nil || a.OpenWorldHint == nil || a.DestructiveHint == nil {
				t.Fatalf("annotations %+v lack openWorldHint or destructiveHint", a)
			}
			if a.ReadOnlyHint && (!a.IdempotentHint || *a.DestructiveHint) {
				t.Errorf("a read tool must be idempotent and not destructive: %+v", a)
			}
			var in struct {
				Properties map[string]struct {
					Description string                     `json:"description"`
					Properties  map[string]json.RawMessage `json:"properties"`
				} `json:"properties"`
			}
			b, _ := json.Marshal(tl.InputSchema)
			if err := json.Unmarshal(b, &in); err != nil {
				t.Fatal(err)
			}
			for name, p := range in.Properties {
				if p.Description == "" || strings.HasSuffix(p.Description, " parameter") {
					t.Errorf("property %s is described %q", name, p.Description)
				}
				for sub, raw := range p.Properties {
					var sp struct {
						Description string `json:"description"`
					}
					_ = json.Unmarshal(raw, &sp)
					if sp.Description == "" {
						t.Errorf("property %s.%s has no description", name, sub)
					}
				}
			}
			// Request fields the tool does not offer must not be named.
			if tool.Op.Request != nil {
				for _, f := range apischema.Fields(tool.Op.Request) {
					if _, offered := in.Properties[f.Name]; !offered && regexp.MustCompile(`\b`+f.Name+`\b`).MatchString(tl.Description) {
						t.Errorf("description names %s, which the schema lacks: %q", f.Name, tl.Description)
					}
				}
			}
			if tool.Op.Response != nil && apischema.For(tool.Op.Response, apischema.Response)["type"] == "object" && tl.OutputSchema == nil {
				t.Error("a JSON object answer without an outputSchema")
			}
		})
	}
}

// TestStructuredContent: a read tool's answer is also its structuredContent,
// and that validates against the tool's outputSchema.
func TestStructuredContent(t *testing.T) {
	cs, d := session(t)
	ctx := context.Background()
	if _, err := d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo-harbor"}); err != nil {
		t.Fatal(err)
	}
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"chalupa_admin_get_status", "chalupa_admin_list_fleet", "chalupa_admin_list_environments", "chalupa_admin_list_jobs", "chalupa_admin_get_reaper_status"} {
		t.Run(name, func(t *testing.T) {
			res, text := call(t, cs, name, nil)
			if res.IsError || res.StructuredContent == nil {
				t.Fatalf("error %v, structuredContent %v: %s", res.IsError, res.StructuredContent, text)
			}
			sc, _ := json.Marshal(res.StructuredContent)
			var a, b any
			_ = json.Unmarshal(sc, &a)
			_ = json.Unmarshal([]byte(text), &b)
			as, _ := json.Marshal(a)
			bs, _ := json.Marshal(b)
			if string(as) != string(bs) {
				t.Errorf("structuredContent differs from the text answer")
			}
			var schema jsonschema.Schema
			for _, tl := range list.Tools {
				if tl.Name == name {
					raw, _ := json.Marshal(tl.OutputSchema)
					if err := json.Unmarshal(raw, &schema); err != nil {
						t.Fatal(err)
					}
				}
			}
			r, err := schema.Resolve(nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Validate(a); err != nil {
				t.Errorf("structuredContent breaks the outputSchema: %v", err)
			}
		})
	}
}

// TestWipeCacheAsksThePhraseOnce: the cache wipe takes one box and its
// phrase in confirm; the tool fills the daemon's confirmation parameter
// from it, so the daemon does not refuse the phrase (it answers for the
// box), and the tool does not offer confirmation.
func TestWipeCacheAsksThePhraseOnce(t *testing.T) {
	cs, _ := session(t)
	res, text := call(t, cs, "chalupa_admin_pulumi_wipe_cache", map[string]any{"box": "web-1", "confirm": "wipe web-1"})
	if strings.Contains(text, "confirmation") {
		t.Fatalf("the daemon refused the phrase: error %v, %s", res.IsError, text)
	}
	if !strings.Contains(text, "404 not_found") {
		t.Fatalf("the daemon did not answer for the box (no such box here): %s", text)
	}
}
