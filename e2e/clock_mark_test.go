package e2e

// End-to-end test of the wall-clock high-water mark (docs/operations.md,
// "Signed ingest"): the built binary refuses a captured request after a
// restart with its clock behind the newest signed request it accepted, and
// the mark travels with the replica.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// markBeat is one signed heartbeat, kept byte for byte so it can be
// replayed.
type markBeat struct {
	header http.Header
	body   []byte
}

// TestReplayAfterStepBackBinary: a heartbeat is accepted by a daemon on
// the real clock and captured. The daemon restarts ten minutes ahead and
// accepts a heartbeat signed on that clock (the fleet's ten minutes), then
// restarts 541 s behind the mark it set: the captured request is inside
// the signing window again and is refused 401 timestamp_skew, never 202,
// whether or not its nonce is still stored (the in-process
// TestReplayAfterStepBack prunes it). The same after a restore from the
// replica, which holds the mark. Wall time: about 21 s (five starts, four
// clean stops and a restore), run in parallel with the other end-to-end
// tests.
func TestReplayAfterStepBackBinary(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil) // the embedded default's file replica
	k := daemontest.EnvironmentKey(t, d.Admin(), "demo-mark")
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(at time.Time, dep string) markBeat {
		body, err := json.Marshal(map[string]any{
			"environmentSlug": "demo-mark", "agentVersion": "e2e/1", "sentAt": at,
			"deployment": map[string]any{"id": dep},
			"reaper":     map[string]any{"idleChecks": 1, "limitMinutes": 30, "lastActivityAt": at.Add(-5 * time.Second), "ciActive": false},
		})
		if err != nil {
			t.Fatal(err)
		}
		ts, nonce := strconv.FormatInt(at.Unix(), 10), protocol.NewNonce()
		h := http.Header{}
		h.Set(protocol.HeaderKeyID, k.KeyID)
		h.Set(protocol.HeaderTimestamp, ts)
		h.Set(protocol.HeaderNonce, nonce)
		h.Set(protocol.HeaderSignature, protocol.Sign(raw, ts, nonce, http.MethodPost, ingest.HeartbeatRoute, body))
		h.Set("Content-Type", "application/json")
		return markBeat{header: h, body: body}
	}
	send := func(d *proctest.Daemon, b markBeat) (int, string) {
		t.Helper()
		resp, err := d.Do(context.Background(), http.MethodPost, ingest.HeartbeatRoute, b.header, b.body)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.NewDecoder(bytes.NewReader(resp.Body)).Decode(&e)
		return resp.Status, e.Error.Code
	}

	signed := time.Now().UTC()
	captured := sign(signed, "dep-mark-1")
	if code, rc := send(d, captured); code != http.StatusAccepted {
		t.Fatalf("heartbeat on the real clock: %d %s", code, rc)
	}
	ingestE2EStop(t, d)

	later := proctest.StartDaemon(t, bin, d.EnvCopy(), "--clock-offset", "10m")
	if code, rc := send(later, sign(time.Now().Add(10*time.Minute).UTC(), "dep-mark-2")); code != http.StatusAccepted {
		t.Fatalf("heartbeat ten minutes on: %d %s", code, rc)
	}
	ingestE2EStop(t, later) // the mark is written at the stop

	// 541 s behind the mark: the daemon's clock is 59 s after the
	// captured request's signature.
	behind := proctest.StartDaemon(t, bin, d.EnvCopy(), "--clock-offset", "59s")
	if code, rc := send(behind, captured); code != http.StatusUnauthorized || rc != "timestamp_skew" {
		t.Fatalf("the replay after the step back: %d %q, want 401 timestamp_skew", code, rc)
	}
	if !strings.Contains(behind.Logs(), "behind the high-water mark") {
		t.Fatalf("serve did not say its clock is behind the mark:\n%s", behind.Logs())
	}
	ingestE2EStop(t, behind)

	t.Run("restored from the replica", func(t *testing.T) {
		litestream := proctest.ToolPath(t, "litestream")
		restored := proctest.Restore(t, litestream, e2eFileURL(filepath.Join(d.DataDir, "replica")), nil)
		ro, err := storage.OpenReadOnly(context.Background(), restored)
		if err != nil {
			t.Fatal(err)
		}
		mark, err := storage.ClockMark(context.Background(), ro.Read)
		ro.Close()
		if err != nil || mark.Before(signed.Add(9*time.Minute)) {
			t.Fatalf("the replica's mark %s (%v), want about ten minutes after %s", mark, err, signed)
		}
		env := e2eSecrets(d.Env)
		env["CHALUPA_DATA_DIR"] = t.TempDir()
		env["CHALUPA_LISTEN"] = proctest.FreeAddr(t)
		e2eCopyFile(t, restored, filepath.Join(env["CHALUPA_DATA_DIR"], "chalupa.db"))
		fromReplica := proctest.StartDaemon(t, bin, env, "--clock-offset", "59s")
		if code, rc := send(fromReplica, captured); code != http.StatusUnauthorized || rc != "timestamp_skew" {
			t.Fatalf("the replay on the restored database: %d %q, want 401 timestamp_skew", code, rc)
		}
		ingestE2EStop(t, fromReplica)
	})
}
