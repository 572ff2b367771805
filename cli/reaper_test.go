package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestReaperStatusSaysTheState: `admin reaper status` against a daemon
// with one active deployment that is due: each line is true of the mode
// and the token (docs/operations.md, "Reaper"). With the reaper off and
// the write token set it said "write token not set" and "no active
// deployment" while listing the due one.
func TestReaperStatusSaysTheState(t *testing.T) {
	fake := dofake.New(t)
	write := fake.AddToken("write", dofake.FullAccess...)
	for _, tc := range []struct {
		name      string
		env       map[string]string
		want, not []string
	}{
		{name: "off with the write token set", env: map[string]string{"CHALUPA_REAPER": "off", "DIGITALOCEAN_WRITE_TOKEN": write},
			want: []string{"off: the reaper does not run", "configured (unused while the reaper is off)", "none (the reaper is off)",
				"1 (the reaper is off: nothing is destroyed)", "dep-due"},
			not: []string{"not set", "no active deployment", "idle destruction waits"}},
		{name: "off without the write token", env: map[string]string{"CHALUPA_REAPER": "off"},
			want: []string{"off: the reaper does not run", "not set: the reaper does not run", "none (the reaper is off)", "dep-due"},
			not:  []string{"no active deployment"}},
		// The loop is not started (the harness's default): a live reaper
		// with an active deployment has planned no wake-up yet.
		{name: "live before its loop planned a wake-up", env: map[string]string{"DIGITALOCEAN_WRITE_TOKEN": write},
			want: []string{"mode                  live", "write token           configured\n", "none planned yet", "dep-due"},
			not:  []string{"not set", "no active deployment"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["CHALUPA_DO_API_URL"] = fake.URL
			p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: tc.env})
			ctx := context.Background()
			if _, err := p.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo-harbor"}); err != nil {
				t.Fatal(err)
			}
			env, err := storage.EnvironmentBySlug(ctx, p.App.DB.Read, "demo-harbor")
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC()
			storagetest.Deployment(t, p.App.DB, storage.Deployment{EnvironmentID: env.ID, ID: "dep-due", DropletID: 4242,
				LaunchedAt: now.Add(-time.Hour), IdleDeadlineAt: now.Add(-time.Minute), LastHeartbeatAt: now})
			out, code := runIn(map[string]string{"CHALUPA_ADMIN_TOKEN": p.Admin.Token, "CHALUPA_URL": p.URL}, "", "admin", "reaper", "status")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("status does not say %q:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out, w) {
					t.Errorf("status says %q, untrue here:\n%s", w, out)
				}
			}
		})
	}
}
