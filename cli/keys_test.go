package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
)

// TestAdminKeysRotationOutput: `keys rotate` prints each running box's
// outcome and exits 1 when one was not rotated; with no key issued for
// other producers it says so and --out writes nothing; `box deliver-key`
// exits 0 only for a rotated box; `keys revoke` names the boxes it silences
// and says how to retire a key without silencing anyone
// (docs/operations.md, "Ingest keys").
func TestAdminKeysRotationOutput(t *testing.T) {
	t.Parallel()
	rotated := adminapi.BoxKeyRotation{Box: "web-1", DropletID: 501, Outcome: adminapi.RotationRotated,
		KeyID: "env_demo-harbor_1111111111111111", RevokedKeyIDs: []string{"env_demo-harbor_0000000000000000"}}
	unreachable := adminapi.BoxKeyRotation{Box: "web-2", DropletID: 502, Outcome: adminapi.RotationUnreachable,
		Reason: "the droplet's SSH did not come up within 1m0s on droplet 502; the old key was left as it was"}
	var mu sync.Mutex
	var deliver adminapi.BoxKeyRotation
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/admin/boxes/web-1/deliver-key":
			mu.Lock()
			answer := deliver
			mu.Unlock()
			_ = json.NewEncoder(w).Encode(answer)
		case body["action"] == "rotate":
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(adminapi.IssuedKey{EnvironmentSlug: "demo-harbor", Boxes: &[]adminapi.BoxKeyRotation{rotated, unreachable}})
		case body["action"] == "revoke":
			_ = json.NewEncoder(w).Encode(adminapi.RevokedKey{KeyID: rotated.KeyID, EnvironmentSlug: "demo-harbor", Status: "revoked",
				StillSigning: []adminapi.SigningProducer{{Deployment: "droplet-501", DropletID: 501, Box: "web-1"}, {Deployment: "ci-7"}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ts.Close)

	dir := filepath.Join(t.TempDir(), "keys")
	out, code := cliRun(t, ts.URL, nil, "admin", "keys", "rotate", "demo-harbor", "--out", dir)
	for _, want := range []string{
		"box web-1 (droplet 501): rotated; its key: env_demo-harbor_1111111111111111; revoked: env_demo-harbor_0000000000000000",
		"box web-2 (droplet 502): unreachable — the droplet's SSH did not come up",
		"no key issued for other producers",
		"1 of 2 running boxes not rotated",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rotate output lacks %q:\n%s", want, out)
		}
	}
	if code != 1 {
		t.Errorf("rotate with a box not rotated: exit %d, want 1", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "ingest.key")); err == nil {
		t.Error("--out wrote a key although none was issued")
	}

	for _, tc := range []struct {
		answer adminapi.BoxKeyRotation
		code   int
		want   string
	}{
		{rotated, 0, "box web-1 (droplet 501): rotated"},
		{adminapi.BoxKeyRotation{Box: "web-1", DropletID: 501, Outcome: adminapi.RotationNotConfirmed, KeyID: rotated.KeyID,
			PendingKeyIDs: []string{"env_demo-harbor_0000000000000000"}, Reason: "no heartbeat signed with the new key within 1m30s"},
			1, "not confirmed; its key: env_demo-harbor_1111111111111111; revoked at its first heartbeat with the new key: env_demo-harbor_0000000000000000"},
	} {
		t.Run(tc.answer.Outcome, func(t *testing.T) {
			mu.Lock()
			deliver = tc.answer
			mu.Unlock()
			out, code := cliRun(t, ts.URL, nil, "admin", "box", "deliver-key", "web-1")
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("deliver-key: exit %d, want %d with %q:\n%s", code, tc.code, tc.want, out)
			}
		})
	}

	out, code = cliRun(t, ts.URL, nil, "admin", "keys", "revoke", rotated.KeyID)
	for _, want := range []string{"silenced: box web-1 (droplet-501)", "silenced: deployment ci-7", "chalupa admin keys rotate demo-harbor"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("revoke: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
}

// TestAdminKeysAgainstAnOlderDaemon: a daemon older than rotations over SSH
// answers rotate without boxes and revoke without stillSigning; the CLI
// says it does not know rather than that no box was reached or nobody goes
// silent (docs/operations.md, "Rollback").
func TestAdminKeysAgainstAnOlderDaemon(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		if body["action"] == "revoke" {
			_, _ = w.Write([]byte(`{"keyId":"env_demo-harbor_0123456789abcdef","environmentSlug":"demo-harbor","status":"revoked"}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"keyId":"env_demo-harbor_1111111111111111","keyMaterial":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8","environmentSlug":"demo-harbor","status":"active","rotatedKeyIds":["env_demo-harbor_0123456789abcdef"]}`))
	}))
	t.Cleanup(ts.Close)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "keys", "rotate", "demo-harbor"}, "running boxes: " + unknownText},
		{[]string{"admin", "keys", "revoke", "env_demo-harbor_0123456789abcdef"}, "producers still signing with it: " + unknownText},
	} {
		t.Run(tc.args[2], func(t *testing.T) {
			out, code := cliRun(t, ts.URL, nil, tc.args...)
			if code != 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want 0 with %q:\n%s", code, tc.want, out)
			}
		})
	}
}
