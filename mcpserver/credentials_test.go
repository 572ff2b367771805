package mcpserver_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

const (
	walkEnv = "demo-harbor"
	walkDep = "dep-1"
	walkBox = "box-web"
)

// walkArgs are valid arguments for every tool, in the order the walk
// calls them: reads and mutations first, the destructive tools last (each
// with its exact phrase), so every read sees the seeded chunk.
var walkArgs = []struct {
	tool string
	args map[string]any
	// ok is set when the call must succeed on this daemon (converge and
	// provisioning are not configured, so the job and SSH tools answer
	// errors, which the walk checks all the same).
	ok bool
}{
	{"chalupa_admin_get_status", nil, true},
	{"chalupa_admin_check_tokens", nil, true},
	{"chalupa_admin_list_environments", nil, true},
	{"chalupa_admin_list_organizations", nil, true},
	{"chalupa_admin_list_fleet", nil, true},
	{"chalupa_admin_list_retention_runs", nil, true},
	{"chalupa_admin_get_telemetry_audit", nil, true},
	{"chalupa_admin_get_deployment_performance", map[string]any{"slug": walkEnv, "id": walkDep}, true},
	{"chalupa_admin_get_costs", nil, true},
	{"chalupa_admin_get_reaper_status", nil, true},
	{"chalupa_admin_list_events", map[string]any{"environment": walkEnv}, true},
	{"chalupa_admin_list_runs", map[string]any{"slug": walkEnv}, true},
	{"chalupa_admin_list_boxes", nil, true},
	{"chalupa_admin_list_jobs", map[string]any{"limit": 5}, true},
	{"chalupa_admin_get_job", map[string]any{"id": "1"}, false},
	{"chalupa_admin_diagnose_job", map[string]any{"id": "1"}, false},
	{"chalupa_admin_get_ssh_key", nil, false},
	// The name before initialisms were one word, answered for one release.
	{"chalupa_admin_get_s_s_h_key", nil, false},
	{"chalupa_admin_list_loops", nil, true},
	{"chalupa_admin_list_logs", map[string]any{"slug": walkEnv, "id": walkDep}, true},
	{"chalupa_admin_get_log_chunk", map[string]any{"slug": walkEnv, "id": walkDep, "session": "s1", "seq": "0"}, true},
	// seq as a JSON number, as an assistant writes it.
	{"chalupa_admin_get_log_chunk", map[string]any{"slug": walkEnv, "id": walkDep, "session": "s1", "seq": 0}, true},
	// The download grant's operation is never exposed: called by the name
	// it would have, it is an unknown tool.
	{"chalupa_admin_get_log_download", map[string]any{"slug": walkEnv, "id": walkDep, "session": "s1", "seq": "0"}, false},
	{"chalupa_admin_get_operations_report", map[string]any{"since": "24h"}, true},
	{"chalupa_admin_list_alerts", nil, true},
	// No sink is configured here: the test answers 409 no_sinks.
	{"chalupa_admin_test_alert_sinks", map[string]any{}, false},
	{"chalupa_admin_ack_alert", map[string]any{"id": "01NOSUCHALERT"}, false},
	{"chalupa_admin_mute_alert_kind", map[string]any{"kind": "clock-step", "for": "2h", "confirm": "mute clock-step for 2h"}, true},
	{"chalupa_admin_unmute_alert_kind", map[string]any{"kind": "clock-step"}, true},
	{"chalupa_admin_create_environment", map[string]any{"slug": "from-mcp"}, true},
	{"chalupa_admin_set_session_policy", map[string]any{"slug": walkEnv, "kind": "demo", "maxSessionSeconds": 7200}, true},
	{"chalupa_admin_clear_session_policy", map[string]any{"slug": walkEnv}, true},
	{"chalupa_admin_create_organization", map[string]any{"slug": "acme", "name": "Acme"}, true},
	{"chalupa_admin_run_retention", nil, true},
	{"chalupa_admin_reconcile_costs", nil, false},
	{"chalupa_admin_run_reaper_tick", nil, false},
	{"chalupa_admin_create_box", map[string]any{"name": walkBox, "environment": walkEnv, "region": "nyc3", "size": "s-2vcpu-4gb",
		"image": "ubuntu-24-04-x64", "sshKeyFingerprints": []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
		"customerSource": "203.0.113.7/32", "controlPlaneSource": "198.51.100.9/32", "volumeSizeGiB": 20}, true},
	{"chalupa_admin_update_box", map[string]any{"box": walkBox, "size": "s-4vcpu-8gb"}, true},
	{"chalupa_admin_get_box", map[string]any{"box": walkBox}, true},
	{"chalupa_admin_pause_loop", map[string]any{"name": "retention"}, true},
	{"chalupa_admin_resume_loop", map[string]any{"name": "retention"}, true},
	{"chalupa_admin_set_log_services", map[string]any{"slug": walkEnv, "services": []string{"chalupa-agent.service"}}, true},
	{"chalupa_admin_pulumi_converge", map[string]any{"scope": map[string]any{"kind": "box", "id": walkBox}, "action": "preview", "confirm": "preview " + walkBox}, false},
	{"chalupa_admin_pulumi_cancel_state", map[string]any{"scope": map[string]any{"kind": "box", "id": walkBox}, "confirm": "cancel " + walkBox}, false},
	{"chalupa_admin_upgrade_box_agent", map[string]any{"box": walkBox, "confirm": "upgrade agent " + walkBox}, false},                   // no release configured: 422
	{"chalupa_admin_start_agent_rollout", map[string]any{"environment": walkEnv, "confirm": "roll out the agent to " + walkEnv}, false}, // no release configured: 422
	{"chalupa_admin_get_agent_rollout", map[string]any{"id": "01JNOSUCHROLLOUT0000000000"}, false},                                      // 404
	{"chalupa_admin_deliver_box_key", map[string]any{"box": walkBox, "confirm": "deliver key " + walkBox}, false},                       // no droplet: 409
	{"chalupa_admin_pulumi_wipe_cache", map[string]any{"box": walkBox, "confirmation": "wipe " + walkBox, "confirm": "wipe " + walkBox}, false},
	{"chalupa_admin_erase_telemetry", map[string]any{"environmentSlug": walkEnv, "confirm": "erase telemetry " + walkEnv}, true},
	{"chalupa_admin_erase_logs", map[string]any{"environmentSlug": walkEnv, "confirm": "erase logs " + walkEnv}, true},
	{"chalupa_admin_end_deployment", map[string]any{"slug": walkEnv, "id": walkDep, "confirm": "end deployment " + walkDep}, true},
	{"chalupa_admin_revoke_ingest_key", map[string]any{"keyId": "", "confirm": "revoke key "}, true}, // the key id is filled in
}

// TestNoToolAnswerCarriesACredential walks every tool the server lists,
// with valid arguments, against a daemon with log storage on versitygw
// holding a committed chunk, and asserts no answer — success or error —
// carries a presigned URL's signature or credential, a token, or key
// material (docs/operations.md, "MCP server": nothing that returns a
// secret is exposed). The download grant is the operator's alone
// (`chalupa admin logs get`); the model reads the chunk's metadata.
func TestNoToolAnswerCarriesACredential(t *testing.T) {
	gw := proctest.StartVersityGW(t)
	d := daemontest.NewInProcess(t, daemontest.AppOptions{Env: map[string]string{
		"CHALUPA_LOGS_URL": "s3://" + gw.Bucket + "/logs?endpoint=" + gw.Endpoint + "&region=us-east-1",
		"CHALUPA_LOGS_KEY": gw.AccessKey, "CHALUPA_LOGS_SECRET": gw.SecretKey,
	}})
	cs := connect(t, d)
	ctx := context.Background()
	if _, err := d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: walkEnv}); err != nil {
		t.Fatal(err)
	}
	key, err := d.Admin.IssueIngestKey(ctx, walkEnv)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := protocol.DecodeKeyMaterial(key.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	shipChunk(t, d, key.KeyID, raw)
	// The operator's download grant is a working credential: the walk
	// must never show one.
	if g, err := d.Admin.GetLogDownload(ctx, adminapi.LogDownloadRequest{EnvironmentSlug: walkEnv, DeploymentID: walkDep, Session: "s1", Seq: "0"}); err != nil || !strings.Contains(g.URL, "X-Amz-Signature=") {
		t.Fatalf("the operator's grant: %+v %v", g, err)
	}

	secrets := map[string]string{"a presigned signature": "X-Amz-Signature", "a presigned credential": "X-Amz-Credential",
		"the ingest key material": key.KeyMaterial, "a log store signature": "Signature="}
	for k, v := range d.Env {
		if v != "" && (strings.Contains(k, "TOKEN") || strings.Contains(k, "SECRET") || strings.Contains(k, "_KEY") || strings.Contains(k, "PASSWORD")) {
			secrets[k] = v
		}
	}
	listed, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	walked, isListed := map[string]bool{}, map[string]bool{}
	for _, w := range walkArgs {
		walked[w.tool] = true
	}
	for _, tl := range listed.Tools {
		isListed[tl.Name] = true
		if !walked[tl.Name] {
			t.Errorf("tool %s is not walked: give it valid arguments in walkArgs", tl.Name)
		}
	}
	for _, w := range walkArgs {
		t.Run(w.tool, func(t *testing.T) {
			args := w.args
			if w.tool == "chalupa_admin_revoke_ingest_key" {
				args = map[string]any{"keyId": key.KeyID, "confirm": "revoke key " + key.KeyID}
			}
			if !isListed[w.tool] {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: w.tool, Arguments: args})
				if err == nil && !res.IsError {
					t.Fatalf("%s is not listed but answered", w.tool)
				}
				return
			}
			res, text := call(t, cs, w.tool, args)
			if w.ok && res.IsError {
				t.Errorf("error with valid arguments: %s", text)
			}
			for what, s := range secrets {
				if strings.Contains(text, s) {
					t.Errorf("the answer carries %s: %.200s", what, text)
				}
			}
			t.Logf("error %v, %d bytes", res.IsError, len(text))
		})
	}
}

// connect serves the MCP server on d's admin client and connects the SDK's
// client to it in memory.
func connect(t *testing.T, d *daemontest.InProcess) *mcp.ClientSession {
	t.Helper()
	return serve(t, d.Admin)
}

// shipChunk makes deployment walkDep with a heartbeat and ships one chunk
// as seq 0 of session s1, as the agent does: open, plan, PUT, commit.
func shipChunk(t *testing.T, d *daemontest.InProcess, keyID string, raw []byte) {
	t.Helper()
	ctx := context.Background()
	cl := &protocol.Client{BaseURL: d.URL, KeyID: keyID, Key: raw}
	post := func(path string, v any) []byte {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cl.Post(ctx, path, b)
		if err != nil || resp.Status != http.StatusAccepted {
			t.Fatalf("%s: %+v %v", path, resp, err)
		}
		return resp.Body
	}
	now := time.Now().UTC()
	post("/api/ingest/heartbeat", protocol.HeartbeatV1{EnvironmentSlug: walkEnv, Deployment: protocol.HeartbeatDeploy{ID: walkDep}, AgentVersion: "test/1",
		SentAt: now, Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now}})
	post("/api/ingest/logs/sessions", protocol.OpenV1{EnvironmentSlug: walkEnv, DeploymentID: walkDep, SessionID: "s1", Service: "chalupa-agent.service"})
	chunk := []byte("one chunk of logs\n")
	sum := sha256.Sum256(chunk)
	wire := protocol.ChunkV1{EnvironmentSlug: walkEnv, DeploymentID: walkDep, SessionID: "s1", Seq: 0, Size: int64(len(chunk)), SHA256: hex.EncodeToString(sum[:])}
	var p protocol.LogChunkPlanned
	if err := json.Unmarshal(post("/api/ingest/logs/plan", wire), &p); err != nil || p.Upload == nil {
		t.Fatalf("plan answer: %+v %v", p, err)
	}
	req, err := http.NewRequest(p.Upload.Method, p.Upload.URL, bytes.NewReader(chunk))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range p.Upload.Headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %d", resp.StatusCode)
	}
	post("/api/ingest/logs/commit", wire)
}
