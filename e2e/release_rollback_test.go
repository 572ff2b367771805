package e2e

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/schema"
)

// topExpands counts the newest migrations that declare themselves expand,
// down to the first that does not, and names that one: withholding the
// first count stands in for a previous release that can run on this
// schema, withholding one more for one that cannot.
func topExpands(t *testing.T) (n int, contract string) {
	t.Helper()
	names, err := fs.Glob(schema.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for i := len(names) - 1; i >= 0; i-- { // Glob sorts; the names are zero-padded
		b, err := fs.ReadFile(schema.FS, names[i])
		if err != nil {
			t.Fatal(err)
		}
		head, _, _ := strings.Cut(string(b), "-- +goose Up")
		if !strings.Contains(head, "-- chalupa:migration expand") {
			return n, names[i]
		}
		n++
	}
	t.Fatal("every migration is an expand")
	return 0, ""
}

// TestRollbackToPreviousRelease: the release runbook's rollback is
// "install the previous release and start it" (docs/operations.md,
// "Rollback"). A binary without the newest, expand-only migration starts on
// the database the current release migrated, serves, and keeps every write;
// the current release starts again on it with nothing lost. A binary
// without a contract migration refuses, naming it, and changes nothing.
func TestRollbackToPreviousRelease(t *testing.T) {
	t.Parallel()
	expands, contract := topExpands(t)
	if expands == 0 {
		t.Fatalf("the newest migration (%s) is not an expand: nothing here can roll back to a previous release without a restore", contract)
	}
	bin := proctest.BuildBinary(t)
	prev := proctest.BuildWithheld(t, expands)
	older := proctest.BuildWithheld(t, expands+1)
	ctx := context.Background()

	d := proctest.StartDaemon(t, bin, nil)
	if _, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "before-rollback"}); err != nil {
		t.Fatal(err)
	}
	if st := opsHeartbeat(t, d, "before-rollback", "dep-current"); st != 202 {
		t.Fatalf("heartbeat on the current release: %d", st)
	}
	e2eStop(t, d)

	// The previous release on the current schema: starts, serves, writes.
	p := proctest.StartDaemon(t, prev, d.EnvCopy())
	if st := opsHeartbeat(t, p, "before-rollback", "dep-previous"); st != 202 {
		t.Fatalf("heartbeat on the previous release: %d, want 202", st)
	}
	e2eStop(t, p)

	// A release without a contract migration refuses, naming it.
	out, code := proctest.RunCommand(t, older, "", d.EnvCopy(), "serve")
	if code == 0 || !strings.Contains(out, contract) || !strings.Contains(out, "contract migration") {
		t.Fatalf("serve of a release older than a contract migration: exit %d, want a refusal naming %s:\n%s", code, contract, out)
	}
	if out, code := proctest.RunCommand(t, older, "", d.EnvCopy(), "config", "check"); code == 0 || !strings.Contains(out, contract) {
		t.Fatalf("config check of that release: exit %d, want a refusal naming %s:\n%s", code, contract, out)
	}

	// Forward again: every write of both releases is there.
	d2 := proctest.StartDaemon(t, bin, d.EnvCopy())
	fleet, err := d2.Admin().ListFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, env := range fleet.Environments {
		for _, dep := range env.Deployments {
			seen[dep.ID] = true
		}
	}
	if !seen["dep-current"] || !seen["dep-previous"] {
		t.Fatalf("after rolling forward the fleet holds %v, want dep-current and dep-previous", seen)
	}
	e2eStop(t, d2)
}
