package e2e

// End-to-end test of the reaper (docs/operations.md, "Reaper") with the
// built binary: daemon, admin CLI and agent as processes, the DigitalOcean
// test server (digitalocean/dofake) as the provider, and the real `litestream
// restore` CLI.

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
)

// TestReaperEndToEnd: a heartbeat with a one-minute idle limit whose
// activity is ~55 s old; dofake sees the DELETE, with the write token, at
// the deadline (not minutes later); `admin fleet` shows the deployment
// ended and the environment sunk; `admin events` shows reaper-destroyed;
// SIGTERM; the restored replica holds the event.
func TestReaperEndToEnd(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	fake := dofake.New(t)
	writeToken := fake.AddToken("write", dofake.FullAccess...)
	readToken := fake.AddToken("read", dofake.ReadOnly...)
	droplet := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-reap")})
	bystander := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-reap")})

	replica := (&url.URL{Scheme: "file", Path: filepath.Join(t.TempDir(), "replica")}).String()
	d := proctest.StartDaemon(t, bin, map[string]string{
		"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": writeToken, "DIGITALOCEAN_READ_TOKEN": readToken,
		"CHALUPA_REPLICA_URL": replica,
	})
	ingestE2ECLI(t, bin, d, "admin", "env", "create", "demo-reap")
	keyDir := filepath.Join(t.TempDir(), "agent")
	ingestE2ECLI(t, bin, d, "admin", "keys", "issue", "demo-reap", "--out", keyDir)
	keyID, err := os.ReadFile(filepath.Join(keyDir, "key-id"))
	if err != nil {
		t.Fatal(err)
	}

	// Activity 55 s ago with a one-minute limit: the deadline is ~5 s away.
	activity := filepath.Join(t.TempDir(), "activity")
	if err := os.WriteFile(activity, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	last := time.Now().Add(-55 * time.Second).Truncate(time.Second)
	if err := os.Chtimes(activity, last, last); err != nil {
		t.Fatal(err)
	}
	deadline := last.Add(time.Minute)
	out, code := proctest.RunCommand(t, bin, "", nil, "agent", "heartbeat", "--url", d.URL,
		"--key-id", strings.TrimSpace(string(keyID)), "--key-file", filepath.Join(keyDir, "ingest.key"),
		"--env", "demo-reap", "--deployment", "dep-reap-1", "--droplet-id", strconv.Itoa(droplet.ID),
		"--limit-minutes", "1", "--activity-file", activity)
	if code != 0 || !strings.Contains(out, " 202 ") {
		t.Fatalf("agent heartbeat exited %d:\n%s", code, out)
	}

	testwait.Eventually(t, testwait.Long, "dofake sees the DELETE", func() (bool, string) {
		n := len(fake.Deletes())
		return n > 0, strconv.Itoa(n) + " deletes"
	})
	del := fake.Deletes()
	if len(del) != 1 || del[0].Token != "write" || del[0].Path != "/v2/droplets/"+strconv.Itoa(droplet.ID) {
		t.Fatalf("DELETEs %v, want one of droplet %d with the write token", del, droplet.ID)
	}
	if del[0].At.Before(deadline) {
		t.Fatalf("DELETE at %v, before the deadline %v", del[0].At, deadline)
	}
	// Logged, not asserted tightly: the figure comes from
	// BenchmarkReapLatency. The bound only catches the 5-minute re-check
	// standing in for the event-driven wake-up.
	latency := del[0].At.Sub(deadline)
	t.Logf("reap latency after the deadline: %v", latency)
	if latency > time.Minute {
		t.Fatalf("DELETE %v after the deadline: the reaper did not wake for it", latency)
	}
	if _, ok := fake.Droplet(bystander.ID); !ok {
		t.Fatal("the other droplet of the environment was destroyed")
	}
	for _, r := range fake.Requests() {
		if r.Method == "GET" && r.Path == "/v2/account" {
			// Each token's read-only check, made by the code that holds
			// it (docs/operations.md, "Alerts"): the read token's is not
			// the reaper's.
			continue
		}
		if r.Token != "write" {
			t.Fatalf("the reaper sent %v with a token other than the write token", r)
		}
	}

	var fleet adminapi.Fleet
	testwait.Eventually(t, testwait.Long, "the deployment ended", func() (bool, string) {
		out := ingestE2ECLI(t, bin, d, "admin", "fleet", "--json")
		if err := json.Unmarshal([]byte(out), &fleet); err != nil {
			t.Fatalf("fleet --json: %v\n%s", err, out)
		}
		for _, e := range fleet.Environments {
			for _, dep := range e.Deployments {
				if e.Slug == "demo-reap" && dep.ID == "dep-reap-1" {
					return dep.Status == "ended" && e.Status == "sunk", dep.Status + "/" + e.Status
				}
			}
		}
		return false, "no deployment"
	})
	events := ingestE2ECLI(t, bin, d, "admin", "events", "--env", "demo-reap", "--kind", "reaper-destroyed")
	if !strings.Contains(events, "reaper-destroyed") || !strings.Contains(events, "dep-reap-1") || !strings.Contains(events, "idle") {
		t.Fatalf("admin events lacks the reaper-destroyed event:\n%s", events)
	}
	status := ingestE2ECLI(t, bin, d, "admin", "reaper", "status")
	if !strings.Contains(status, "configured") || !strings.Contains(status, "none (no active deployment") {
		t.Fatalf("admin reaper status:\n%s", status)
	}

	ingestE2EStop(t, d)
	restored := proctest.Restore(t, litestream, replica, nil)
	ctx := context.Background()
	db, err := storage.OpenReadOnly(ctx, restored)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ev, err := storage.ListLifecycleEvents(ctx, db.Read, storage.EventFilter{EnvironmentSlug: "demo-reap", Kind: "reaper-destroyed", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 1 || ev[0].ID != "reaper:demo-reap:dep-reap-1" || ev[0].Reason != "idle" {
		t.Fatalf("restored events %+v, want reaper:demo-reap:dep-reap-1 (idle)", ev)
	}
	ingestE2ENoSecrets(t, map[string]string{"write token": writeToken, "read token": readToken, "admin token": d.AdminToken()},
		map[string]string{"daemon logs": d.Logs(), "events": events, "status": status})
}
