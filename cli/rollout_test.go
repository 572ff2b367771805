package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// TestBoxShowAgentUpgrade: `admin box show` prints the box's agent upgrade
// state when the server answers one, and no such line otherwise
// (docs/operations.md, "Agent install", under Upgrade).
func TestBoxShowAgentUpgrade(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state *adminapi.BoxAgentUpgradeState
		want  string
	}{
		{"upgrading", &adminapi.BoxAgentUpgradeState{State: "upgrading", Version: "v1.1.0", Since: time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)},
			"agent upgrade  upgrading to v1.1.0 since 2026-12-06T07:00:00Z: done when its agent heartbeats with that version"},
		{"failed", &adminapi.BoxAgentUpgradeState{State: "upgrade-failed", Version: "v1.1.0", Since: time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)},
			"upgrade-failed: the upgrade to v1.1.0"},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(adminapi.Box{ID: "BX", Name: "bx", Agent: true, AgentUpgrade: tc.state})
			}))
			t.Cleanup(ts.Close)
			out, code := cliRun(t, ts.URL, nil, "admin", "box", "show", "bx")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			if tc.want == "" {
				if strings.Contains(out, "agent upgrade") {
					t.Fatalf("a line for no state:\n%s", out)
				}
				return
			}
			if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(tc.want), " ")) {
				t.Fatalf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}
