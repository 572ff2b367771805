package main

// End-to-end tests of the operator's rollback tools (issue 13 §3): loop
// switches and the restore-point rollback, with the built binary as daemon
// and CLI, versitygw as S3 and the real `litestream restore`.

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/signer"
)

// opsCLI runs `chalupa args…` against d and returns its output and exit code.
func opsCLI(t *testing.T, bin string, d *daemontest.Daemon, args ...string) (string, int) {
	t.Helper()
	return daemontest.RunCommand(t, bin, "", map[string]string{
		"CHALUPA_ADMIN_TOKEN": d.AdminToken(), "CHALUPA_URL": d.URL,
	}, args...)
}

// opsHeartbeat issues an ingest key for slug on d and sends one signed
// heartbeat; it returns the answer's status.
func opsHeartbeat(t *testing.T, d *daemontest.Daemon, slug, deployment string) int {
	t.Helper()
	ctx := context.Background()
	k, err := d.Admin().IssueIngestKey(ctx, slug)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := signer.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	body, _ := json.Marshal(ingest.HeartbeatV1{
		EnvironmentSlug: slug, Deployment: ingest.HeartbeatDeploy{ID: deployment}, AgentVersion: "e2e/1",
		SentAt: now, Reaper: ingest.ReaperObservation{LimitMinutes: 30, LastActivityAt: now},
	})
	resp, err := (&signer.Client{BaseURL: d.URL, KeyID: k.KeyID, Key: raw}).Post(ctx, "/api/ingest/heartbeat", body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status
}

// TestLoopSwitchesEndToEnd: `serve --pause-loops` pauses loops that stay
// paused across a restart without the flag; `chalupa admin loops` shows
// them and resumes one; ingest is served while every loop is paused; an
// unknown loop is refused by serve (exit 2, before anything is opened) and
// by the CLI (exit 1).
func TestLoopSwitchesEndToEnd(t *testing.T) {
	t.Parallel()
	bin := daemontest.BuildBinary(t)

	out, code := daemontest.RunCommand(t, bin, "", daemontest.NewSecrets(), "serve", "--pause-loops", "reaper,ingest")
	if code != 2 || !strings.Contains(out, "ingest") {
		t.Fatalf("serve --pause-loops reaper,ingest: exit %d, want 2 naming the loop:\n%s", code, out)
	}

	d := daemontest.StartDaemon(t, bin, nil, "--pause-loops", "reaper,retention,costs,jobs")
	if _, err := d.Admin().CreateEnvironment(context.Background(), adminapi.CreateEnvironmentRequest{Slug: "loops-demo"}); err != nil {
		t.Fatal(err)
	}
	if st := opsHeartbeat(t, d, "loops-demo", "dep-loops"); st != 202 {
		t.Fatalf("heartbeat with every loop paused: %d, want 202 (ingest is never paused)", st)
	}
	e2eStop(t, d)

	d2 := daemontest.StartDaemon(t, bin, d.EnvCopy())
	out, code = opsCLI(t, bin, d2, "admin", "loops")
	t.Logf("chalupa admin loops after a restart without --pause-loops:\n%s", out)
	for _, name := range []string{"reaper", "retention", "costs", "jobs"} {
		if code != 0 || !strings.Contains(out, name+"  ") || strings.Count(out, "PAUSED") != 4 {
			t.Fatalf("admin loops: exit %d, want all four paused:\n%s", code, out)
		}
	}
	if out, code = opsCLI(t, bin, d2, "admin", "loops", "resume", "retention"); code != 0 || !strings.Contains(out, "loop retention resumed") {
		t.Fatalf("admin loops resume retention: exit %d:\n%s", code, out)
	}
	if out, code = opsCLI(t, bin, d2, "admin", "loops", "pause", "nonce-prune"); code != 1 || !strings.Contains(out, "unknown_loop") {
		t.Fatalf("admin loops pause nonce-prune: exit %d, want 1 unknown_loop:\n%s", code, out)
	}
	out, _ = opsCLI(t, bin, d2, "admin", "status")
	if strings.Contains(out, "loop retention") || !strings.Contains(out, "loop reaper") {
		t.Fatalf("admin status: want reaper paused, retention not:\n%s", out)
	}
	d2.Signal(syscall.SIGTERM)
	if c := d2.Wait(); c != 0 {
		t.Fatalf("exit %d", c)
	}
}
