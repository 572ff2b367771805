package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// TestBoxShowSaysWhatTheDropletRuns: `box show` is the box's declaration;
// where a line could be read as what the running droplet has, it says
// which (docs/operations.md, "Boxes"): no data volume is "none", not a
// volume of 0 GiB, and an agent setting changed after the recorded
// droplet launched is not what that droplet runs — it keeps what it booted
// with.
func TestBoxShowSaysWhatTheDropletRuns(t *testing.T) {
	t.Parallel()
	on, off := true, false
	idle, session := int64(30), int64(0)
	launched := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	box := func(agent *bool, volume int64, droplet int64, updated time.Time) boxAnswer {
		b := boxAnswer{Agent: agent, AgentIdleMinutes: &idle, AgentSessionMinutes: &session, ConfigUpdatedAt: &updated}
		// The row's own stamp moves when a launch is recorded; the
		// configuration's is what a change is judged by.
		b.Name, b.VolumeSizeGiB, b.UpdatedAt = "gpu-1", volume, launched.Add(2*time.Hour)
		if droplet != 0 {
			b.Resources.DropletID = droplet
			b.LastLaunch = &adminapi.BoxLaunch{DropletID: droplet, LaunchedAt: launched}
		}
		return b
	}
	for _, tc := range []struct {
		name      string
		box       boxAnswer
		want, not []string
	}{
		{name: "no volume", box: box(&on, 0, 0, launched), want: []string{"data volume            none"}, not: []string{"0 GiB"}},
		{name: "a volume", box: box(&on, 100, 0, launched), want: []string{"data volume            100 GiB"}},
		{name: "agent turned off after the droplet launched", box: box(&off, 0, 4242, launched.Add(time.Hour)),
			want: []string{"off for the box's next droplet", "droplet 4242 launched before the last change and keeps what it booted with"},
			not:  []string{"no agent installed"}},
		{name: "agent off since before the launch", box: box(&off, 0, 4242, launched.Add(-time.Hour)),
			want: []string{"off for the box's next droplet"}, not: []string{"keeps what it booted with"}},
		{name: "agent on, changed before the launch", box: box(&on, 0, 4242, launched.Add(-time.Hour)),
			want: []string{"on, idle limit 30 min", "updated 2026-12-01T09:00:00Z"}, not: []string{"keeps what it booted with", "11:00"}},
		{name: "agent on, never launched", box: box(&on, 0, 0, launched),
			want: []string{"on, idle limit 30 min, no session limit"}, not: []string{"keeps what it booted with"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf strings.Builder
			if err := printBox(&buf, tc.box); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("box show does not say %q:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out, w) {
					t.Errorf("box show says %q, untrue here:\n%s", w, out)
				}
			}
		})
	}
}
