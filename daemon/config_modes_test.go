package daemon_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestConfigModesShowEverywhere: with the reaper or costs off (or the
// reaper in dry run), adminGetStatus, /metrics and the signed-in console
// say so; /api/ready stays as it is (docs/operations.md, "Configuration").
func TestConfigModesShowEverywhere(t *testing.T) {
	fake := dofake.New(t)
	write := fake.AddToken("write", dofake.FullAccess...)
	read := fake.AddToken("read", dofake.FullAccess...)
	for _, tc := range []struct {
		name        string
		env         map[string]string
		mode, costs string
		notes       []string
	}{
		{name: "embedded default", mode: "off", costs: "off", notes: []string{"the reaper is off", "costs are off"}},
		{name: "dry run, costs off", env: map[string]string{"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": write,
			"CHALUPA_REAPER": "dry-run", "CHALUPA_COSTS": "off"}, mode: "dry-run", costs: "off",
			notes: []string{"the reaper is in dry run", "costs are off"}},
		{name: "live, costs on", env: map[string]string{"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": write,
			"DIGITALOCEAN_READ_TOKEN": read}, mode: "live", costs: "on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: tc.env})
			st, err := p.Admin.GetStatus(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Each note is logged once at start, in one wording: the
			// reaper's own start no longer repeats the reaper-off note.
			for _, n := range tc.notes {
				if c := strings.Count(p.Logs.String(), n); c != 1 {
					t.Errorf("start log says %q %d times, want once:\n%s", n, c, p.Logs.String())
				}
			}
			if tc.mode == "off" && strings.Contains(p.Logs.String(), "the reaper does not run") {
				t.Errorf("start log repeats the reaper-off warning in a second wording:\n%s", p.Logs.String())
			}
			if st.ReaperMode != tc.mode || st.Costs != tc.costs || len(st.ModeNotes) != len(tc.notes) {
				t.Fatalf("status: reaper %q, costs %q, notes %q; want %q, %q, %d notes", st.ReaperMode, st.Costs, st.ModeNotes, tc.mode, tc.costs, len(tc.notes))
			}
			for i, n := range tc.notes {
				if !strings.Contains(st.ModeNotes[i], n) {
					t.Errorf("note %d %q, want %q", i, st.ModeNotes[i], n)
				}
			}

			req, _ := http.NewRequest("GET", p.URL+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+p.Env[proctest.ReadyTokenVar])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, want := range []string{`chalupa_reaper_mode{mode="` + tc.mode + `"} 1`, `chalupa_costs_mode{mode="` + tc.costs + `"} 1`} {
				if !strings.Contains(string(b), want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			for _, other := range []string{"live", "dry-run", "off"} {
				if other != tc.mode && !strings.Contains(string(b), `chalupa_reaper_mode{mode="`+other+`"} 0`) {
					t.Errorf("/metrics: reaper mode %s is not 0", other)
				}
			}

			setPassword(t, p)
			c := newConsoleClient(t, p)
			if resp := c.login(t, consolePassword); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("login %d", resp.StatusCode)
			}
			_, body := c.get(t, "/app")
			if got := strings.Contains(body, `id="mode-off"`); got != (len(tc.notes) > 0) {
				t.Fatalf("console banner shown %v, want %v:\n%s", got, len(tc.notes) > 0, body)
			}
			for _, n := range tc.notes {
				if !strings.Contains(body, n) {
					t.Errorf("console banner lacks %q", n)
				}
			}
		})
	}
}
