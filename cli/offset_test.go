package cli

import (
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
)

// TestOffsetLines: admin status says when the clock offset is not
// measured, shows the fleet's and each environment's offset, and says
// what to do when the fleet is more than 30 s off (docs/operations.md,
// "Heartbeats and deadlines").
func TestOffsetLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   adminapi.ClockOffset
		want []string
	}{
		{"not measured", adminapi.ClockOffset{}, []string{"clock offset\tnot measured (fewer than 5 deployments heard in 10 min)"}},
		{"within 30 s", adminapi.ClockOffset{Measured: true, Seconds: -1.25, Deployments: 7,
			Environments: []adminapi.EnvironmentOffset{{Environment: "demo-a", Seconds: -1.25, Deployments: 7}}},
			[]string{"clock offset\t-1.2 s (median of 7 deployments' signed heartbeats; positive: the server is ahead)",
				"clock offset demo-a\t-1.2 s (7 deployments)"}},
		{"off", adminapi.ClockOffset{Measured: true, Off: true, Seconds: 45.04, Deployments: 5},
			[]string{"clock offset\t+45.0 s (median of 5 deployments' signed heartbeats; positive: the server is ahead): more than 30 s, fix the server's clock (nothing is held)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := offsetLines(tc.in); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
