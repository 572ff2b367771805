package e2e

// End-to-end tests of the operator's rollback tools (docs/operations.md, "Loop switches" and "Rollback"): loop
// switches and the restore-point rollback, with the built binary as daemon
// and CLI, versitygw as S3 and the real `litestream restore`.

import (
	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/schema"
	"github.com/chalupa-run/chalupa/storage"
)

// opsCLI runs `chalupa args…` against d and returns its output and exit code.
func opsCLI(t *testing.T, bin string, d *proctest.Daemon, args ...string) (string, int) {
	t.Helper()
	return proctest.RunCommand(t, bin, "", map[string]string{
		"CHALUPA_ADMIN_TOKEN": d.AdminToken(), "CHALUPA_URL": d.URL,
	}, args...)
}

// opsHeartbeat issues an ingest key for slug on d and sends one signed
// heartbeat; it returns the answer's status.
func opsHeartbeat(t *testing.T, d *proctest.Daemon, slug, deployment string) int {
	t.Helper()
	ctx := context.Background()
	k, err := d.Admin().IssueIngestKey(ctx, slug)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	body, _ := json.Marshal(protocol.HeartbeatV1{
		EnvironmentSlug: slug, Deployment: protocol.HeartbeatDeploy{ID: deployment}, AgentVersion: "e2e/1",
		SentAt: now, Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now},
	})
	resp, err := (&protocol.Client{BaseURL: d.URL, KeyID: k.KeyID, Key: raw}).Post(ctx, "/api/ingest/heartbeat", body)
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
	bin := proctest.BuildBinary(t)

	out, code := proctest.RunCommand(t, bin, "", proctest.NewSecrets(), "serve", "--pause-loops", "reaper,ingest")
	if code != 2 || !strings.Contains(out, "ingest") {
		t.Fatalf("serve --pause-loops reaper,ingest: exit %d, want 2 naming the loop:\n%s", code, out)
	}

	d := proctest.StartDaemon(t, bin, nil, "--pause-loops", "reaper,retention,costs,jobs")
	if _, err := d.Admin().CreateEnvironment(context.Background(), adminapi.CreateEnvironmentRequest{Slug: "loops-demo"}); err != nil {
		t.Fatal(err)
	}
	if st := opsHeartbeat(t, d, "loops-demo", "dep-loops"); st != 202 {
		t.Fatalf("heartbeat with every loop paused: %d, want 202 (ingest is never paused)", st)
	}
	e2eStop(t, d)

	d2 := proctest.StartDaemon(t, bin, d.EnvCopy())
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

// opsOldDatabase makes dataDir/chalupa.db at schema v11 (the release before
// the loop switches) holding the environment slug: the database an older
// chalupa left, which the next `serve` migrates after taking a restore point.
func opsOldDatabase(t *testing.T, dataDir, slug string) {
	t.Helper()
	ctx := context.Background()
	old := fstest.MapFS{}
	entries, err := fs.ReadDir(schema.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".sql") && n < "0012" {
			b, _ := fs.ReadFile(schema.FS, n)
			old[n] = &fstest.MapFile{Data: b}
		}
	}
	db, err := storage.Open(ctx, filepath.Join(dataDir, "chalupa.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{FS: old}); err != nil {
		t.Fatal(err)
	}
	// Plain SQL of that schema: today's queries read columns v11 lacks.
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		now := time.Now().UnixMilli()
		_, err := tx.ExecContext(ctx, `INSERT INTO environments (org_id, slug, name, status, created_at, updated_at)
			VALUES (?, ?, ?, 'active', ?, ?)`, storage.PlatformOrgID, slug, slug, now, now)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRollbackRunbook rehearses the README's rollback runbook against the
// built binary with versitygw as the replica: a database an older release
// left is migrated (restore point taken) and written to; `migrate rollback`
// is refused while the daemon runs and without the exact confirmation
// (nothing changed), then, with the daemon stopped, lists the loss by table
// and rolls back; the daemon starts on the rolled-back database with its
// loops paused and a fresh replica generation shown by status, serves
// health and ingest, and the loops are resumed; finally the real
// `litestream restore` from the generation's path yields the rolled-back
// data plus the writes made after the rollback, and none of the lost ones.
func TestRollbackRunbook(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	s3 := proctest.StartVersityGW(t)
	ctx := context.Background()

	dataDir := t.TempDir()
	opsOldDatabase(t, dataDir, "before-point")
	env := s3.DaemonEnv("chalupa")
	env["CHALUPA_DATA_DIR"] = dataDir
	d := proctest.StartDaemon(t, bin, env)
	for _, slug := range []string{"lost-1", "lost-2"} {
		if _, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: slug}); err != nil {
			t.Fatal(err)
		}
	}
	offline := d.EnvCopy()
	out, code := proctest.RunCommand(t, bin, "", offline, "migrate", "restore-points")
	t.Logf("$ chalupa migrate restore-points\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasSuffix(lines[1], "ok") || !strings.Contains(lines[1], "v11") {
		t.Fatalf("restore-points: exit %d, want one verified v11 point:\n%s", code, out)
	}
	point := strings.Fields(lines[1])[0]
	phrase := "roll back to " + point

	// Runbook step 1: stop the daemon. While it runs, rollback refuses.
	out, code = proctest.RunCommand(t, bin, "", offline, "migrate", "rollback", "--to", point, "--confirmation", phrase)
	if code != 1 || !strings.Contains(out, "in use") {
		t.Fatalf("rollback beside a running daemon: exit %d, want 1 (in use):\n%s", code, out)
	}
	e2eStop(t, d)
	out, code = proctest.RunCommand(t, bin, "", offline, "migrate", "rollback", "--to", point, "--confirmation", "roll back")
	if code != 1 || !strings.Contains(out, "nothing changed") {
		t.Fatalf("rollback with a wrong confirmation: exit %d:\n%s", code, out)
	}
	if in := e2eInFile(t, filepath.Join(dataDir, "chalupa.db")); !in["lost-1"] {
		t.Fatalf("a refused rollback changed the database: %v", in)
	}

	// Step 3: restore the point (the newer schema is the reason here).
	out, code = proctest.RunCommand(t, bin, "", offline, "migrate", "rollback", "--to", point, "--confirmation", phrase)
	t.Logf("$ chalupa migrate rollback --to %s --confirmation %q\n%s", point, phrase, out)
	if code != 0 || !regexp.MustCompile(`(?m)^environments\s+3\s+1\s+-2$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^loop_switches\s+0\s+\(no table\)`).MatchString(out) || !strings.Contains(out, "LOST: every write from") {
		t.Fatalf("rollback: exit %d, want the loss by table (environments 3 → 1, loop_switches not in the point):\n%s", code, out)
	}
	gen := regexp.MustCompile(`replica generation (g\S+):`).FindStringSubmatch(out)
	if gen == nil {
		t.Fatalf("rollback names no replica generation:\n%s", out)
	}
	moved, _ := filepath.Glob(filepath.Join(dataDir, "rolled-back", "*", "chalupa.db"))
	if len(moved) != 1 || !e2eInFile(t, moved[0])["lost-2"] {
		t.Fatalf("the previous database was not moved aside intact: %v", moved)
	}

	// Step 4: start with the loops paused; verify health, status, ingest.
	d2 := proctest.StartDaemon(t, bin, offline, "--pause-loops", "reaper,retention,costs,jobs")
	st, err := d2.Admin().GetStatus(ctx)
	if err != nil || st.Replication.Generation != gen[1] {
		t.Fatalf("status after rollback: generation %q (%v), want %s", st.Replication.Generation, err, gen[1])
	}
	out, _ = opsCLI(t, bin, d2, "admin", "status")
	t.Logf("$ chalupa admin status\n%s", out)
	if !strings.Contains(out, "replica generation\t") && !strings.Contains(out, "replica generation") {
		t.Fatalf("admin status does not show the generation:\n%s", out)
	}
	listed := e2eListed(t, d2)
	if !listed["before-point"] || listed["lost-1"] || listed["lost-2"] {
		t.Fatalf("serving after rollback: %v, want before-point only", listed)
	}
	if _, err := d2.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "after-rollback"}); err != nil {
		t.Fatal(err)
	}
	if st := opsHeartbeat(t, d2, "after-rollback", "dep-after"); st != 202 {
		t.Fatalf("ingest after rollback: %d, want 202", st)
	}
	// Step 5: resume the loops.
	for _, name := range []string{"reaper", "retention", "costs", "jobs"} {
		if out, code := opsCLI(t, bin, d2, "admin", "loops", "resume", name); code != 0 {
			t.Fatalf("resume %s: exit %d:\n%s", name, code, out)
		}
	}
	e2eStop(t, d2)

	// The replica: the generation holds the rolled-back data plus the later
	// writes; the old history was not written behind and still holds what
	// the rollback dropped.
	inGen := e2eInFile(t, proctest.Restore(t, litestream, s3.ReplicaURL("chalupa/"+gen[1]), s3.Credentials()))
	if !inGen["before-point"] || !inGen["after-rollback"] || inGen["lost-1"] || inGen["lost-2"] {
		t.Fatalf("litestream restore of generation %s: %v, want before-point and after-rollback only", gen[1], inGen)
	}
	inOld := e2eInFile(t, proctest.Restore(t, litestream, s3.ReplicaURL("chalupa"), s3.Credentials()))
	if !inOld["lost-1"] || inOld["after-rollback"] {
		t.Fatalf("litestream restore of the old history: %v, want it untouched (lost-1, no after-rollback)", inOld)
	}
	t.Logf("litestream restore: generation %s holds %v; the old history holds %v", gen[1], inGen, inOld)
}
