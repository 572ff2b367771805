package e2e

// `chalupa agent run` and `agent status` as built, against a real `chalupa
// serve`: the command-line rules, a SIGTERM that delivers the final window,
// and a status that reports without sending.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
)

// TestAgentRunCommandLine: `agent run` follows the admin CLI's URL rules
// (exit 2 with the usage line) and refuses a key file others can read
// (exit 1), before sending anything.
func TestAgentRunCommandLine(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	dir, key := agentKeyFile(t)
	args := func(url, keyFile string) []string {
		return []string{"agent", "run", "--url", url, "--key-id", "env_x1_0000000000000000", "--key-file", keyFile, "--env", "x1",
			"--deployment", "d1", "--state-dir", filepath.Join(dir, "state")}
	}
	for _, tc := range []struct{ url, want string }{
		{"http://chalupa.example.net", "plain http"},
		{"http://127.0.0.1:9/api", "origin"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			out, code := proctest.RunCommand(t, bin, "", nil, args(tc.url, key)...)
			if code != exitUsage || !strings.Contains(out, tc.want) || !strings.Contains(out, "usage: chalupa agent run") {
				t.Errorf("exit %d, want %d mentioning %q with the usage line:\n%s", code, exitUsage, tc.want, out)
			}
		})
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := proctest.RunCommand(t, bin, "", nil, args("http://127.0.0.1:9", key)...); code != 1 || !strings.Contains(out, "chmod 600") {
		t.Errorf("a 0644 key file: exit %d, want 1:\n%s", code, out)
	}
}

// TestAgentRunSIGTERM: the built agent against the built daemon sends its
// first heartbeat at once; on SIGTERM it delivers the final window and its
// shutdown lifecycle event and exits 0, and `agent status --json` then
// shows an empty spool and the deliveries, without sending anything. A CI
// job's `agent report-run` then delivers a run that `admin runs --json`
// lists.
func TestAgentRunSIGTERM(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.Start(t, bin, proctest.Options{})
	ctx := context.Background()
	k := daemontest.EnvironmentKey(t, d.Admin(), "demo-harbor")
	dir := t.TempDir()
	keyFile := e2eAgentKey(t, filepath.Join(dir, "keys"), k)
	state := filepath.Join(dir, "state")
	p := startAgent(t, bin, append(os.Environ(),
		"CHALUPA_AGENT_URL="+d.URL, "CHALUPA_AGENT_ENV=demo-harbor", "CHALUPA_AGENT_KEY_FILE="+keyFile,
		"CHALUPA_AGENT_DEPLOYMENT=dep-e2e", "CHALUPA_AGENT_DROPLET_ID=7", "CHALUPA_AGENT_REGION=nyc3",
		"CHALUPA_AGENT_STATE_DIR="+state, "CHALUPA_AGENT_DISK_PATH="+dir),
		"--nvidia-smi", "none", "--run-root", filepath.Join(dir, "run"))
	logs := p.log
	p.waitAccepted(state)
	p.stop()
	out, code := proctest.RunCommand(t, bin, "", nil, "agent", "status", "--json", "--state-dir", state, "--run-root", filepath.Join(dir, "run"))
	if code != 0 {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	var rep agent.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if rep.DeploymentID != "dep-e2e" || rep.Spool.Records != 0 || rep.Delivered != 2 || rep.LastDeliveryAt.IsZero() || rep.Reaper.LimitMinutes != 30 {
		t.Fatalf("status after SIGTERM: %+v\nagent log:\n%s", rep, logs.String())
	}
	events, err := d.Admin().ListEvents(ctx, adminapi.ListEventsRequest{Environment: "demo-harbor", Kind: "shutdown"})
	if err != nil || len(events.Events) != 1 || events.Events[0].Deployment != "dep-e2e" || !strings.Contains(events.Events[0].Message, "droplet 7") {
		t.Fatalf("shutdown events = %+v, %v", events, err)
	}

	agentEnv := map[string]string{"CHALUPA_AGENT_URL": d.URL, "CHALUPA_AGENT_ENV": "demo-harbor",
		"CHALUPA_AGENT_KEY_FILE": keyFile, "CHALUPA_AGENT_STATE_DIR": state}
	artifact := `{"v":1,"name":"junit.xml","mediaType":"application/xml","sizeBytes":42,"sha256":"` + strings.Repeat("0a", 32) +
		`","locator":{"kind":"https","url":"https://ci.example.com/1/junit.xml"}}`
	started := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339)
	out, code = proctest.RunCommand(t, bin, "", agentEnv, "agent", "report-run", "--suite", "e2e", "--run-id", "ci-1", "--status", "passed",
		"--started-at", started, "--artifact", artifact)
	if code != 0 || !strings.Contains(out, "delivered: 1") {
		t.Fatalf("report-run: exit %d\n%s", code, out)
	}
	out, code = proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_URL": d.URL, "CHALUPA_ADMIN_TOKEN": d.AdminToken()}, "admin", "runs", "demo-harbor", "--json")
	var runs adminapi.RunList
	if code != 0 || json.Unmarshal([]byte(out), &runs) != nil || len(runs.Runs) != 1 || runs.Runs[0].Deployment != "dep-e2e" ||
		len(runs.Runs[0].Artifacts) != 1 || runs.Runs[0].Artifacts[0].Locator.URL != "https://ci.example.com/1/junit.xml" {
		t.Fatalf("admin runs --json: exit %d\n%s", code, out)
	}
	out, code = proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_URL": d.URL, "CHALUPA_ADMIN_TOKEN": d.AdminToken()}, "admin", "runs", "demo-harbor")
	if code != 0 || !strings.Contains(out, "ci-1") || !strings.Contains(out, "junit.xml") {
		t.Fatalf("admin runs: exit %d\n%s", code, out)
	}
}

// TestAgentRunFindsNvidiaSMIOnPath: the built agent, as the unit runs it
// (no --nvidia-smi, so the default name is looked up on PATH), finds a fake
// nvidia-smi in a directory on its PATH, runs it with the documented query
// and reports its GPU metrics: the final window SIGTERM delivers carries
// them (docs/operations.md, "Agent").
func TestAgentRunFindsNvidiaSMIOnPath(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.Start(t, bin, proctest.Options{})
	ctx := context.Background()
	k := daemontest.EnvironmentKey(t, d.Admin(), "demo-harbor")
	dir := t.TempDir()
	keyFile := e2eAgentKey(t, filepath.Join(dir, "keys"), k)
	// The fake records the arguments of each run, then answers the query
	// for two GPUs (one with fields the driver cannot read).
	fakeBin := filepath.Join(dir, "bin")
	os.MkdirAll(fakeBin, 0o755)
	calls := filepath.Join(dir, "nvidia-smi.calls")
	script := "#!/bin/sh\necho \"$*\" >> '" + calls + "'\nprintf '55, 2048, 16384, 65, 120.5\\n[N/A], 1024, 16384, 70, [N/A]\\n'\n"
	if err := os.WriteFile(filepath.Join(fakeBin, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	env := []string{"PATH=" + fakeBin + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "CHALUPA_AGENT_NVIDIA_SMI=") {
			env = append(env, kv)
		}
	}
	p := startAgent(t, bin, append(env,
		"CHALUPA_AGENT_URL="+d.URL, "CHALUPA_AGENT_ENV=demo-harbor", "CHALUPA_AGENT_KEY_FILE="+keyFile,
		"CHALUPA_AGENT_DEPLOYMENT=dep-gpu", "CHALUPA_AGENT_DROPLET_ID=8", "CHALUPA_AGENT_REGION=nyc3",
		"CHALUPA_AGENT_STATE_DIR="+state, "CHALUPA_AGENT_DISK_PATH="+dir),
		"--run-root", filepath.Join(dir, "run"))
	logs := p.log
	p.waitAccepted(state)
	p.stop()
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatalf("the nvidia-smi on PATH never ran: %v\nagent log:\n%s", err, logs.String())
	}
	if got, want := strings.Split(strings.TrimSpace(string(b)), "\n")[0], strings.Join(agent.NvidiaSMIArgs, " "); got != want {
		t.Errorf("nvidia-smi ran with %q, want %q", got, want)
	}
	db, err := storage.OpenReadOnly(ctx, d.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var util, mem, temp, power float64
	err = db.Read.QueryRow(`SELECT gpu_util_pct_max, gpu_mem_used_bytes_last, gpu_temp_c_max, gpu_power_w_last
		FROM telemetry_windows WHERE final = 1`).Scan(&util, &mem, &temp, &power)
	if err != nil {
		t.Fatalf("the final window's GPU metrics: %v\nagent log:\n%s", err, logs.String())
	}
	if util != 55 || mem != 3072<<20 || temp != 70 || power != 120.5 {
		t.Errorf("GPU metrics util %v mem %v temp %v power %v, want 55, 3 GiB, 70, 120.5", util, mem, temp, power)
	}
}

// e2eAgentKey writes k as an agent's key files — dir/ingest.key (the key
// material) and dir/key-id beside it, both 0600 — and returns the key
// file's path, what CHALUPA_AGENT_KEY_FILE names.
func e2eAgentKey(t *testing.T, dir string, k adminapi.IssuedKey) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "ingest.key")
	if err := os.WriteFile(keyFile, []byte(k.KeyMaterial), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key-id"), []byte(k.KeyID), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile
}
