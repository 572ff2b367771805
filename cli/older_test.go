package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chalupa-run/chalupa/internal/strictjson"
)

// olderDaemon is a daemon of an earlier release, as the CLI meets it after a
// rollback (docs/operations.md, "Rollback"): it decodes bodies strictly in
// their old shape, so a field added since is refused as the real one
// refuses it (400 bad_body, `json: unknown field`), and it answers in the
// old shape, without the keys added since.
type olderDaemon struct {
	URL    string
	mu     sync.Mutex
	bodies []string
}

// oldCreateBox is adminCreateBox's body before boxes carried the agent.
type oldCreateBox struct {
	Name               string   `json:"name"`
	Environment        string   `json:"environment"`
	Managed            bool     `json:"managed"`
	Region             string   `json:"region"`
	Size               string   `json:"size"`
	Image              string   `json:"image"`
	SSHKeyFingerprints []string `json:"sshKeyFingerprints"`
	CustomerSource     string   `json:"customerSource"`
	ControlPlaneSource string   `json:"controlPlaneSource"`
	VolumeSizeGiB      int64    `json:"volumeSizeGiB"`
	Tags               []string `json:"tags"`
}

// oldBox is a box as the earlier release answers it: no agent, no limits.
const oldBox = `{"id":"01BOXOLD","name":"gpu-1","environment":"demo","managed":false,"region":"nyc3","size":"s-2vcpu-4gb",
"image":"ubuntu-24-04-x64","sshKeyFingerprints":["3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"],"customerSource":"203.0.113.7/32",
"controlPlaneSource":"198.51.100.9/32","volumeSizeGiB":0,"tags":[],"configVersion":1,
"resources":{"dropletId":0,"firewallId":"","volumeId":"","recordedAt":"0001-01-01T00:00:00Z"},"lastLaunch":null,
"createdAt":"2026-12-01T10:00:00Z","updatedAt":"2026-12-01T10:00:00Z"}`

// oldReaperStatus is adminGetReaperStatus before the mode, the clock guard
// and the destroy pace.
const oldReaperStatus = `{"tokenConfigured":true,"dryRun":false,"ciFreshnessSeconds":600,"activeDeployments":0,"due":[]}`

// oldStatus is adminGetStatus before the reaper and cost modes, the loops
// and the storage health.
const oldStatus = `{"version":"v0.9.0","startedAt":"2026-12-01T10:00:00Z","uptimeSeconds":60,"schemaVersion":18,"dbSizeBytes":4096,
"replication":{"kind":"file","localTxid":3,"remoteTxid":3,"lagSeconds":0,"lagLimitSeconds":60,"failing":false}}`

// oldEnvironments is adminListEnvironments before organizations and the
// storage budget.
const oldEnvironments = `{"environments":[{"slug":"demo","name":"demo","status":"active","createdAt":"2026-12-01T10:00:00Z"}]}`

func newOlderDaemon(t *testing.T) *olderDaemon {
	t.Helper()
	d := &olderDaemon{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		d.mu.Lock()
		d.bodies = append(d.bodies, string(b))
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		answer := func(status int, body string) {
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
		switch r.Method + " " + r.URL.Path {
		case "POST /api/admin/boxes":
			var req oldCreateBox
			if err := strictjson.Decode(b, &req); err != nil {
				msg, _ := json.Marshal(err.Error())
				answer(http.StatusBadRequest, `{"error":{"code":"bad_body","message":`+string(msg)+`}}`)
				return
			}
			answer(http.StatusCreated, oldBox)
		case "GET /api/admin/boxes/gpu-1":
			answer(http.StatusOK, oldBox)
		case "GET /api/admin/reaper":
			answer(http.StatusOK, oldReaperStatus)
		case "GET /api/admin/status":
			answer(http.StatusOK, oldStatus)
		case "GET /api/admin/environments":
			answer(http.StatusOK, oldEnvironments)
		default:
			answer(http.StatusNotFound, `{"error":{"code":"not_found","message":"no such route"}}`)
		}
	}))
	t.Cleanup(ts.Close)
	d.URL = ts.URL
	return d
}

// boxCreateArgs declares gpu-1 with the flags every release had.
var boxCreateArgs = []string{"admin", "box", "create", "gpu-1", "--env", "demo", "--region", "nyc3", "--size", "s-2vcpu-4gb",
	"--image", "ubuntu-24-04-x64", "--ssh-key", "3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa",
	"--customer-source", "203.0.113.7/32", "--control-plane-source", "198.51.100.9/32"}

// TestNewerCLIAgainstAnOlderDaemon: after a server rollback the newer CLI
// sends a field only when the operator set it, so `box create` without the
// agent's flags is accepted by the daemon of the release before them; and
// what the daemon did not answer is shown as unknown, never as its zero
// value ("agent off", "disk 0 bytes free", "0 B / unlimited", "destroy pace
// 0 a minute").
func TestNewerCLIAgainstAnOlderDaemon(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		// code is the exit status; want and not are what the output
		// says and must not say.
		code      int
		want, not []string
	}{
		{name: "box create without the agent's flags", args: boxCreateArgs,
			want: []string{"declared box gpu-1"}},
		{name: "box create with an agent flag the daemon does not know", args: append(boxCreateArgs[:len(boxCreateArgs):len(boxCreateArgs)], "--agent-idle-minutes", "90"),
			code: 1, want: []string{`unknown field "agentIdleMinutes"`, "older than this chalupa"}},
		{name: "box show", args: []string{"admin", "box", "show", "gpu-1"},
			want: []string{"agent                  unknown"}, not: []string{"off", "idle limit 0"}},
		{name: "box show --json", args: []string{"admin", "box", "show", "gpu-1", "--json"},
			want: []string{`"agent": null`, `"agentIdleMinutes": null`}, not: []string{`"agent": false`}},
		{name: "reaper status", args: []string{"admin", "reaper", "status"},
			want: []string{"mode                unknown", "destroy pace        unknown", "clock guard         unknown"},
			not:  []string{"0 a minute", "clock guard         ok"}},
		{name: "status", args: []string{"admin", "status"},
			want: []string{"disk            unknown", "reaper          unknown", "costs           unknown"},
			not:  []string{"0 bytes free"}},
		{name: "env list", args: []string{"admin", "env", "list"},
			want: []string{"unknown"}, not: []string{"unlimited", "0 B"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newOlderDaemon(t)
			out, code := cliRun(t, d.URL, nil, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not say %q:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out, w) {
					t.Errorf("output says %q, which the daemon never said:\n%s", w, out)
				}
			}
		})
	}
}

// TestBoxCreateRefusesIdleLimitZero: `box create --agent-idle-minutes 0`
// is refused before anything is sent (exit 2, saying the range and the
// default) — the daemon reads 0 as "not given" and declared the box with
// 30 minutes without a word, where the operator, after
// --agent-session-minutes 0 ("none"), may have meant no idle limit.
func TestBoxCreateRefusesIdleLimitZero(t *testing.T) {
	t.Parallel()
	d := newOlderDaemon(t)
	out, code := cliRun(t, d.URL, nil, append(boxCreateArgs[:len(boxCreateArgs):len(boxCreateArgs)], "--agent-idle-minutes", "0")...)
	if code != ExitUsage {
		t.Errorf("exit %d, want %d:\n%s", code, ExitUsage, out)
	}
	if !strings.Contains(out, "--agent-idle-minutes must be 1-10080") || !strings.Contains(out, "default, 30") {
		t.Errorf("the refusal does not say the range and the default:\n%s", out)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.bodies) != 0 {
		t.Errorf("the CLI sent %q", d.bodies)
	}
}
