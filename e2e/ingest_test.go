package e2e

// End-to-end tests of signed ingest (docs/operations.md, "Signed ingest") on real input: the built
// binary as daemon, admin CLI and agent; versitygw as S3; the real
// `litestream restore` CLI; `chalupa rewrap` between two daemon runs.

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// ingestE2ECLI runs `chalupa args…` against daemon d with the admin token
// in the environment, and fails the test on a non-zero exit.
func ingestE2ECLI(t *testing.T, bin string, d *proctest.Daemon, args ...string) string {
	t.Helper()
	out, code := proctest.RunCommand(t, bin, "", map[string]string{
		"CHALUPA_ADMIN_TOKEN": d.AdminToken(), "CHALUPA_URL": d.URL,
	}, args...)
	if code != 0 {
		t.Fatalf("chalupa %s exited %d:\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// ingestE2ENoSecrets fails when any secret appears in any of outputs.
func ingestE2ENoSecrets(t *testing.T, secrets map[string]string, outputs map[string]string) {
	t.Helper()
	for what, out := range outputs {
		for name, s := range secrets {
			if s != "" && strings.Contains(out, s) {
				t.Errorf("%s appears in %s", name, what)
			}
		}
	}
}

// ingestE2EStop sends SIGTERM and requires exit status 0.
func ingestE2EStop(t *testing.T, d *proctest.Daemon) {
	t.Helper()
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(); code != 0 {
		t.Fatalf("chalupa serve exited %d after SIGTERM, want 0", code)
	}
}

// TestIngestEndToEnd: the built binary replicating to versitygw; `admin env
// create`, `admin keys issue --out`, then `agent heartbeat` several times as
// processes using the files written; `admin fleet --json` shows the
// deployment and its idle deadline; SIGTERM; the real `litestream restore`
// recovers a database holding every acknowledged heartbeat.
func TestIngestEndToEnd(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	s3 := proctest.StartVersityGW(t)
	env := s3.DaemonEnv("chalupa-ingest")
	// An operator may have AWS_CA_BUNDLE set; the daemon drops it for itself.
	env["AWS_CA_BUNDLE"] = cmp.Or(os.Getenv("AWS_CA_BUNDLE"), "/nonexistent/ca-bundle.pem")
	d := proctest.StartDaemon(t, bin, env)
	outputs := map[string]string{}

	outputs["env create"] = ingestE2ECLI(t, bin, d, "admin", "env", "create", "demo-harbor")
	keyDir := filepath.Join(t.TempDir(), "agent")
	outputs["keys issue"] = ingestE2ECLI(t, bin, d, "admin", "keys", "issue", "demo-harbor", "--out", keyDir)

	keyFile := filepath.Join(keyDir, "ingest.key")
	fi, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("ingest.key has mode %v, want 0600", fi.Mode().Perm())
	}
	material, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := protocol.DecodeKeyMaterial(string(material)); err != nil {
		t.Fatalf("ingest.key: %v", err)
	}
	idBytes, err := os.ReadFile(filepath.Join(keyDir, "key-id"))
	if err != nil {
		t.Fatal(err)
	}
	keyID := strings.TrimSpace(string(idBytes))
	if !regexp.MustCompile(`^env_demo-harbor_[0-9a-f]{16}$`).MatchString(keyID) {
		t.Fatalf("key-id file holds %q", keyID)
	}
	if !strings.Contains(outputs["keys issue"], keyID) {
		t.Fatalf("keys issue --out did not print the key id:\n%s", outputs["keys issue"])
	}

	// The idle deadline is the activity file's mtime + --limit-minutes,
	// carried into the server's frame by elapsed time (docs/operations.md,
	// "Heartbeats and deadlines"): receipt − (sentAt − lastActivityAt) +
	// the limit, so on one machine it is the mtime's deadline moved later
	// by the request's transit alone.
	activity := filepath.Join(t.TempDir(), "activity")
	if err := os.WriteFile(activity, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	lastActivity := time.Now().UTC().Truncate(time.Second).Add(-3 * time.Minute)
	if err := os.Chtimes(activity, lastActivity, lastActivity); err != nil {
		t.Fatal(err)
	}
	deadline := lastActivity.Add(45 * time.Minute)
	session := time.Now().UTC().Truncate(time.Second).Add(3 * time.Hour)
	agent := func(extra ...string) (string, int) {
		args := append([]string{"agent", "heartbeat", "--url", d.URL, "--key-id", keyID, "--key-file", keyFile,
			"--env", "demo-harbor", "--deployment", "dep-e2e-1", "--droplet-id", "4242", "--region", "nyc3",
			"--limit-minutes", "45", "--activity-file", activity, "--session-expires-at", session.Format(time.RFC3339)}, extra...)
		return proctest.RunCommand(t, bin, "", nil, args...)
	}
	accepted := regexp.MustCompile(`(?m)^\S+ 202 \{"accepted":true,`)
	acked := 0
	for i := 0; i < 4; i++ {
		out, code := agent()
		outputs["agent run "+string(rune('a'+i))] = out
		if code != 0 || len(accepted.FindAllString(out, -1)) != 1 {
			t.Fatalf("agent heartbeat #%d exited %d:\n%s", i+1, code, out)
		}
		acked++
	}
	out, code := agent("--every", "50ms", "--count", "3")
	outputs["agent --every"] = out
	if n := len(accepted.FindAllString(out, -1)); code != 0 || n != 3 {
		t.Fatalf("agent --every 50ms --count 3 exited %d with %d accepted:\n%s", code, n, out)
	}
	acked += 3
	// The deadline the daemon stored is the one its last answer named (a
	// later heartbeat never moves activity back); it lies within the
	// transit of the mtime's deadline.
	var answer protocol.HeartbeatAccepted
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, " 202 {"); i >= 0 {
			if err := json.Unmarshal([]byte(line[i+5:]), &answer); err != nil {
				t.Fatalf("heartbeat answer %q: %v", line, err)
			}
		}
	}
	if answer.IdleDeadlineAt.Before(deadline) || answer.IdleDeadlineAt.After(deadline.Add(5*time.Second)) {
		t.Fatalf("answered idle deadline %s, want the activity's %s moved later by transit alone (< 5 s)", answer.IdleDeadlineAt, deadline)
	}
	deadline = answer.IdleDeadlineAt
	// An activity file stamped in the future (a clock set wrong, a copy
	// from another machine) is no activity later than now: the agent still
	// reports, and the deadline is now + the limit at the latest.
	future := filepath.Join(t.TempDir(), "future-activity")
	if err := os.WriteFile(future, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(future, time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	out, code = proctest.RunCommand(t, bin, "", nil, "agent", "heartbeat", "--url", d.URL, "--key-id", keyID,
		"--key-file", keyFile, "--env", "demo-harbor", "--deployment", "dep-e2e-future", "--activity-file", future)
	outputs["agent future activity"] = out
	if code != 0 || len(accepted.FindAllString(out, -1)) != 1 {
		t.Fatalf("agent with an activity file stamped an hour ahead exited %d:\n%s", code, out)
	}

	// A refused heartbeat (wrong environment) exits non-zero and is not stored.
	out, code = proctest.RunCommand(t, bin, "", nil, "agent", "heartbeat", "--url", d.URL, "--key-id", keyID,
		"--key-file", keyFile, "--env", "other-env", "--deployment", "dep-e2e-1")
	outputs["agent wrong env"] = out
	if code == 0 || !strings.Contains(out, " 403 ") || !strings.Contains(out, "environment_mismatch") {
		t.Fatalf("agent with the wrong environment exited %d:\n%s", code, out)
	}

	// Admin commands exit non-zero with the server's error code.
	for _, c := range []struct {
		code string
		args []string
	}{
		{"environment_not_found", []string{"admin", "keys", "issue", "ghost-env"}},
		{"key_not_found", []string{"admin", "keys", "revoke", "env_demo-harbor_0000000000000000"}},
		{"key_not_found", []string{"admin", "api", "adminRevokeIngestKey", "--body", `{"keyId":"env_demo-harbor_0000000000000000"}`}},
		{"environment_exists", []string{"admin", "env", "create", "demo-harbor"}},
	} {
		out, code := proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(), "CHALUPA_URL": d.URL}, c.args...)
		outputs[strings.Join(c.args, " ")] = out
		if code == 0 || !strings.Contains(out, c.code) {
			t.Fatalf("chalupa %s exited %d, want non-zero naming %s:\n%s", strings.Join(c.args, " "), code, c.code, out)
		}
	}

	// The fleet shows the deployment and its deadlines.
	outputs["fleet --json"] = ingestE2ECLI(t, bin, d, "admin", "fleet", "--json")
	var fleet adminapi.Fleet
	if err := json.Unmarshal([]byte(outputs["fleet --json"]), &fleet); err != nil {
		t.Fatalf("fleet --json: %v\n%s", err, outputs["fleet --json"])
	}
	var dep *adminapi.FleetDeployment
	for _, e := range fleet.Environments {
		if e.Slug != "demo-harbor" {
			continue
		}
		if e.Keys["active"] != 1 {
			t.Errorf("fleet key counts %v, want one active", e.Keys)
		}
		for i := range e.Deployments {
			if e.Deployments[i].ID == "dep-e2e-1" {
				dep = &e.Deployments[i]
			}
		}
	}
	if dep == nil {
		t.Fatalf("fleet --json has no deployment dep-e2e-1:\n%s", outputs["fleet --json"])
	}
	if dep.Status != "active" || dep.DropletID != 4242 || !dep.IdleDeadlineAt.Equal(deadline) ||
		!dep.SessionExpiresAt.Equal(session) || dep.LastHeartbeatAt.IsZero() {
		t.Fatalf("fleet entry %+v; want active, droplet 4242, idle deadline %s, session %s", *dep, deadline, session)
	}
	outputs["fleet"] = ingestE2ECLI(t, bin, d, "admin", "fleet")
	if !strings.Contains(outputs["fleet"], "dep-e2e-1") || !strings.Contains(outputs["fleet"], deadline.Format(time.RFC3339)) {
		t.Fatalf("fleet table lacks the deployment or its deadline %s:\n%s", deadline.Format(time.RFC3339), outputs["fleet"])
	}
	outputs["api adminListFleet"] = ingestE2ECLI(t, bin, d, "admin", "api", "adminListFleet")
	if !strings.Contains(outputs["api adminListFleet"], `"dep-e2e-1"`) {
		t.Fatalf("admin api adminListFleet:\n%s", outputs["api adminListFleet"])
	}

	ingestE2EStop(t, d)

	restored := proctest.Restore(t, litestream, s3.ReplicaURL("chalupa-ingest"), s3.Credentials())
	ctx := context.Background()
	if err := storage.IntegrityCheck(ctx, restored); err != nil {
		t.Fatal(err)
	}
	db, err := storage.OpenReadOnly(ctx, restored)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, idle int64
	if err := db.Read.QueryRow(`SELECT count(*) FROM heartbeats WHERE deployment_id = 'dep-e2e-1' AND key_id = ?`, keyID).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != int64(acked) {
		t.Fatalf("restored database holds %d heartbeats, want every acknowledged one (%d)", rows, acked)
	}
	if err := db.Read.QueryRow(`SELECT idle_deadline_at FROM deployments WHERE id = 'dep-e2e-1' AND status = 'active'`).Scan(&idle); err != nil {
		t.Fatal(err)
	}
	if idle != deadline.UnixMilli() {
		t.Fatalf("restored idle deadline %s, want %s", time.UnixMilli(idle).UTC(), deadline)
	}

	outputs["daemon logs"] = d.Logs()
	ingestE2ENoSecrets(t, map[string]string{
		"admin token": d.AdminToken(), "ready token": d.ReadyToken(), "master key": d.Env[proctest.MasterKeyVar],
		"key material": strings.TrimSpace(string(material)), "spaces secret": s3.SecretKey,
	}, outputs)
}

// TestIngestRewrapRoundTrip: keys issued (active, rotating, revoked), daemon
// stopped, `chalupa rewrap` from the old master key to a new one; the daemon
// restarted with the new key verifies every active and rotating key and
// still refuses the revoked one; started with the old key it refuses to
// start. rewrap refuses while the daemon runs, and with a wrong current key.
func TestIngestRewrapRoundTrip(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	ctx := context.Background()
	admin := d.Admin()
	if _, err := admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo-harbor"}); err != nil {
		t.Fatal(err)
	}
	type key struct {
		id  string
		raw []byte
		mat string
	}
	var materials []string
	fromIssued := func(k adminapi.IssuedKey, err error) key {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
		if err != nil {
			t.Fatal(err)
		}
		materials = append(materials, k.KeyMaterial)
		return key{k.KeyID, raw, k.KeyMaterial}
	}
	rotating := fromIssued(admin.IssueIngestKey(ctx, "demo-harbor"))
	active := fromIssued(admin.RotateIngestKey(ctx, "demo-harbor"))
	revoked := fromIssued(admin.IssueIngestKey(ctx, "demo-harbor"))
	if _, err := admin.RevokeIngestKey(ctx, revoked.id); err != nil {
		t.Fatal(err)
	}
	heartbeat := func(base string, k key) (int, string) {
		t.Helper()
		now := time.Now().UTC()
		body, _ := json.Marshal(protocol.HeartbeatV1{
			EnvironmentSlug: "demo-harbor", Deployment: protocol.HeartbeatDeploy{ID: "dep-rewrap"}, AgentVersion: "e2e/1",
			SentAt: now, Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now},
		})
		resp, err := (&protocol.Client{BaseURL: base, KeyID: k.id, Key: k.raw}).Post(ctx, "/api/ingest/heartbeat", body)
		if err != nil {
			t.Fatalf("heartbeat with %s: %v", k.id, err)
		}
		return resp.Status, string(resp.Body)
	}
	expect := func(what, base string, k key, status int) {
		t.Helper()
		if got, body := heartbeat(base, k); got != status {
			t.Fatalf("%s: %d %s, want %d", what, got, body, status)
		}
	}
	expect("rotating key before rewrap", d.URL, rotating, 202)
	expect("active key before rewrap", d.URL, active, 202)
	expect("revoked key before rewrap", d.URL, revoked, 401)

	oldKey := d.Env[proctest.MasterKeyVar]
	newKey := proctest.NewSecrets()[proctest.MasterKeyVar]
	outputs := map[string]string{}
	rewrapEnv := d.EnvCopy()
	rewrapEnv["CHALUPA_INGEST_MASTER_KEY_NEW"] = newKey

	// While serve holds the data dir, rewrap refuses.
	out, code := proctest.RunCommand(t, bin, "", rewrapEnv, "rewrap")
	outputs["rewrap while serving"] = out
	if code == 0 || !strings.Contains(out, "another chalupa process") {
		t.Fatalf("rewrap while serve runs exited %d:\n%s", code, out)
	}
	ingestE2EStop(t, d)

	// A wrong current key is refused and changes nothing.
	wrongEnv := d.EnvCopy()
	wrongEnv[proctest.MasterKeyVar] = proctest.NewSecrets()[proctest.MasterKeyVar]
	wrongEnv["CHALUPA_INGEST_MASTER_KEY_NEW"] = newKey
	out, code = proctest.RunCommand(t, bin, "", wrongEnv, "rewrap")
	outputs["rewrap with a wrong key"] = out
	if code == 0 || !strings.Contains(out, "wrong master key") {
		t.Fatalf("rewrap with a wrong current key exited %d:\n%s", code, out)
	}

	out, code = proctest.RunCommand(t, bin, "", rewrapEnv, "rewrap")
	outputs["rewrap"] = out
	if code != 0 || !strings.Contains(out, "rewrapped 3 ingest key, 0 provider token and 0 SSH identity envelopes: master key version 1 -> 2") {
		t.Fatalf("rewrap exited %d:\n%s", code, out)
	}
	func() {
		db, err := storage.OpenReadOnly(ctx, d.DatabasePath())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n, v1 int
		if err := db.Read.QueryRow(`SELECT count(*), count(*) FILTER (WHERE master_key_version <> 2) FROM ingest_keys`).Scan(&n, &v1); err != nil {
			t.Fatal(err)
		}
		if n != 3 || v1 != 0 {
			t.Fatalf("after rewrap: %d keys, %d not at master key version 2", n, v1)
		}
	}()

	// Restarted with the new key: every key verifies as before.
	newEnv := d.EnvCopy()
	newEnv[proctest.MasterKeyVar] = newKey
	newEnv["CHALUPA_LISTEN"] = proctest.FreeAddr(t)
	d2 := proctest.Start(t, bin, proctest.Options{Env: newEnv})
	expect("rotating key after rewrap", d2.URL, rotating, 202)
	expect("active key after rewrap", d2.URL, active, 202)
	expect("revoked key after rewrap", d2.URL, revoked, 401)
	fresh := fromIssued(d2.Admin().IssueIngestKey(ctx, "demo-harbor"))
	expect("key issued under the new master key", d2.URL, fresh, 202)
	ingestE2EStop(t, d2)

	// Started with the old key, serve refuses with a clear message.
	out, code = proctest.RunCommand(t, bin, "", d.EnvCopy(), "serve")
	outputs["serve with the old key"] = out
	if code == 0 || !strings.Contains(out, "CHALUPA_INGEST_MASTER_KEY") || !strings.Contains(out, "wrong master key") {
		t.Fatalf("serve with the old master key after rewrap exited %d:\n%s", code, out)
	}

	outputs["first daemon logs"] = d.Logs()
	outputs["second daemon logs"] = d2.Logs()
	secrets := map[string]string{"old master key": oldKey, "new master key": newKey,
		"admin token": d.AdminToken(), "ready token": d.ReadyToken()}
	for i, m := range materials {
		secrets["key material "+string(rune('a'+i))] = m
	}
	ingestE2ENoSecrets(t, secrets, outputs)
}
