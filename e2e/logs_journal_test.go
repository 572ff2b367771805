package e2e

// The built agent's journald path (docs/operations.md, "Logs" and "Agent"):
// `--log-unit UNIT` against a fake journalctl first on PATH, as the
// shipper invokes it, and the warning when there is no journalctl.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/agent/logship"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
)

// fakeJournalctl is a journalctl honouring `-u UNIT -o … --show-cursor
// --after-cursor CURSOR` over a journal file of "UNIT<TAB>CURSOR<TAB>TEXT"
// lines: it prints the unit's entries after the cursor (all without one)
// and then "-- cursor: C" of the last one printed, nothing when there are
// none (as `-q` does); each run's unit and cursor go to calls.
const fakeJournalctl = `#!/bin/sh
unit= after=
while [ $# -gt 0 ]; do
	case "$1" in
	-u) unit=$2; shift ;;
	--after-cursor) after=$2; shift ;;
	-o) shift ;;
	esac
	shift
done
echo "$unit|$after" >> '%[2]s'
awk -F '\t' -v unit="$unit" -v after="$after" '
	BEGIN { on = (after == "") }
	$1 == unit { if (on) { print $3; last = $2 } else if ($2 == after) { on = 1 } }
	END { if (last != "") print "-- cursor: " last }' '%[1]s'
`

// agentProc is one run of the built agent.
type agentProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	log    *proctest.SyncBuffer
	exited chan error
}

// startAgent runs the built agent with env (KEY=VALUE) and args until stop.
func startAgent(t *testing.T, bin string, env []string, args ...string) *agentProc {
	t.Helper()
	p := &agentProc{t: t, cmd: exec.Command(bin, append([]string{"agent", "run"}, args...)...), log: &proctest.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

// waitAccepted waits (up to 30 s) until the agent's state in stateDir
// records an accepted (202) heartbeat.
func (p *agentProc) waitAccepted(stateDir string) {
	p.t.Helper()
	testwait.Eventually(p.t, testwait.Long, "an accepted heartbeat", func() (bool, string) {
		st, _ := agent.ReadState(stateDir)
		return st.LastHeartbeatStatus == 202, p.log.String()
	})
}

// stop sends SIGTERM and waits for exit 0.
func (p *agentProc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			p.t.Fatalf("agent exit: %v\n%s", err, p.log.String())
		}
	case <-time.After(agent.ShutdownDeadline + 20*time.Second):
		p.t.Fatalf("agent did not stop; log:\n%s", p.log.String())
	}
}

// agentEnv is the environment of an agent run: os.Environ with PATH
// replaced and the CHALUPA_AGENT_* settings.
func agentEnv(path string, settings map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "CHALUPA_AGENT_") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+path)
	for k, v := range settings {
		env = append(env, k+"="+v)
	}
	return env
}

// TestAgentShipsJournalEndToEnd: the built `agent run --log-unit` reads a
// unit's journal through the journalctl first on its PATH, exactly as
// documented (only that unit's entries, after the saved cursor): the lines
// are stored byte-exact, and a restarted agent resumes after the cursor
// its spool kept, so no line is shipped twice. A unit off the allowlist
// stays spooled, and `agent status` (text and --json) shows both spools.
// Without journalctl on PATH the unit is skipped with a warning while the
// agent runs on.
func TestAgentShipsJournalEndToEnd(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	gw := proctest.StartVersityGW(t)
	d := proctest.Start(t, bin, proctest.Options{Env: e2eLogsEnv(gw, gw.Endpoint)})
	ctx := context.Background()
	k := daemontest.EnvironmentKey(t, d.Admin(), "journal-demo")
	dir := t.TempDir()
	keyFile := e2eAgentKey(t, filepath.Join(dir, "keys"), k)
	journal, calls := filepath.Join(dir, "journal.tsv"), filepath.Join(dir, "journalctl.calls")
	fakeBin := filepath.Join(dir, "bin")
	os.MkdirAll(fakeBin, 0o755)
	if err := os.WriteFile(filepath.Join(fakeBin, "journalctl"), []byte(fmt.Sprintf(fakeJournalctl, journal, calls)), 0o755); err != nil {
		t.Fatal(err)
	}
	// appendJournal adds n entries of cloud-init.service (interleaved with
	// nginx.service's) and returns cloud-init's lines as journalctl prints them.
	next := 0
	appendJournal := func(n int) []byte {
		t.Helper()
		var j, want bytes.Buffer
		for range n {
			line := fmt.Sprintf("2026-12-01T10:%02d:%02d+0000 droplet cloud-init[812]: entry %d: modules ran, tab-free text", next/60%60, next%60, next)
			fmt.Fprintf(&j, "cloud-init.service\ts=%d;i=%x\t%s\n", next, next, line)
			fmt.Fprintf(&j, "nginx.service\tn=%d\t2026-12-01T10:00:00+0000 droplet nginx[9]: request %d\n", next, next)
			want.WriteString(line + "\n")
			next++
		}
		f, err := os.OpenFile(journal, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.Write(j.Bytes())
		return want.Bytes()
	}
	state := filepath.Join(dir, "state")
	settings := map[string]string{"CHALUPA_AGENT_URL": d.URL, "CHALUPA_AGENT_ENV": "journal-demo",
		"CHALUPA_AGENT_KEY_FILE": keyFile, "CHALUPA_AGENT_DEPLOYMENT": "dep-journal",
		"CHALUPA_AGENT_DROPLET_ID": "11", "CHALUPA_AGENT_REGION": "nyc3", "CHALUPA_AGENT_STATE_DIR": state, "CHALUPA_AGENT_DISK_PATH": dir}
	withFake := agentEnv(fakeBin+string(os.PathListSeparator)+os.Getenv("PATH"), settings)
	run := func(env []string) *agentProc {
		t.Helper()
		p := startAgent(t, bin, env, "--nvidia-smi", "none", "--run-root", filepath.Join(dir, "run"),
			"--log-unit", "cloud-init.service", "--log-unit", "nginx.service")
		// This run's first accepted heartbeat, as it logs it (the state
		// file may hold an earlier run's).
		testwait.Eventually(t, testwait.Long, "an accepted heartbeat", func() (bool, string) {
			for _, line := range strings.Split(p.log.String(), "\n") {
				if strings.Contains(line, `"status":202,`) && strings.Contains(line, `"message":"heartbeat"`) {
					return true, ""
				}
			}
			return false, p.log.String()
		})
		return p
	}

	want := appendJournal(300)
	first := run(withFake)
	first.stop() // SIGTERM cuts the pending lines and ships them
	var spool struct {
		Cursor string `json:"cursor"`
	}
	raw, _ := os.ReadFile(filepath.Join(logship.DirFor(state, "cloud-init.service"), "state.json"))
	if err := json.Unmarshal(raw, &spool); err != nil || spool.Cursor != "s=299;i=12b" {
		t.Fatalf("cursor kept after the first run: %q (%v), want the last entry's; agent log:\n%s", spool.Cursor, err, first.log.String())
	}

	// The status of the stopped agent: cloud-init's spool is empty, nginx's
	// holds its refused chunk, unnumbered.
	statusOut, code := proctest.RunCommand(t, bin, "", nil, "agent", "status", "--json", "--state-dir", state, "--run-root", filepath.Join(dir, "run"))
	var rep agent.StatusReport
	if code != 0 || json.Unmarshal([]byte(statusOut), &rep) != nil || len(rep.Logs) != 2 {
		t.Fatalf("agent status --json: exit %d\n%s", code, statusOut)
	}
	ci, ngx := rep.Logs[0], rep.Logs[1]
	if ci.Service != "cloud-init.service" || ci.Chunks != 0 || ci.SessionState != logship.SessionStopped || ci.Refusal != "" || ci.Dropped != 0 {
		t.Errorf("cloud-init.service's spool: %+v", ci)
	}
	if ngx.Service != "nginx.service" || ngx.Chunks != 1 || ngx.Numbered != 0 || ngx.Bytes == 0 || ngx.Oldest.IsZero() ||
		ngx.SessionState != logship.SessionStopped || ngx.Refusal != "open 422 service_not_allowed" || ngx.Finishes != 0 {
		t.Errorf("nginx.service's spool: %+v", ngx)
	}
	text, code := proctest.RunCommand(t, bin, "", nil, "agent", "status", "--state-dir", state, "--run-root", filepath.Join(dir, "run"))
	for _, line := range []string{
		"log spool        cloud-init.service: 0 chunks (0 numbered), 0 bytes, dropped 0; session stopped\n",
		fmt.Sprintf("log spool        nginx.service: 1 chunks (0 numbered), %d bytes, oldest ", ngx.Bytes),
		", dropped 0; session stopped; paused: open 422 service_not_allowed\n",
	} {
		if code != 0 || !strings.Contains(text, line) {
			t.Errorf("agent status lacks %q:\n%s", line, text)
		}
	}

	// A restarted agent resumes after the kept cursor.
	want = append(want, appendJournal(200)...)
	second := run(withFake)
	second.stop()
	b, _ := os.ReadFile(calls)
	var resumed bool
	for _, c := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if unit, _, _ := strings.Cut(c, "|"); unit != "cloud-init.service" && unit != "nginx.service" {
			t.Errorf("journalctl ran for unit %q", unit)
		}
		resumed = resumed || c == "cloud-init.service|s=299;i=12b"
	}
	if !resumed {
		t.Errorf("no journalctl run resumed after the kept cursor; runs:\n%s", b)
	}

	got, err := e2eLogsGet(t, bin, d, "journal-demo", "dep-journal", "--service", "cloud-init.service")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes (%v), want the unit's %d, each line once; agent logs:\n%s\n%s", len(got), err, len(want), first.log.String(), second.log.String())
	}
	l, err := d.Admin().ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: "journal-demo", DeploymentID: "dep-journal"})
	if err != nil || len(l.Sessions) != 2 {
		t.Fatalf("sessions: %+v %v, want one per run of cloud-init.service", l, err)
	}
	for _, s := range l.Sessions {
		if s.Service != "cloud-init.service" || s.FinishedAt == nil || !strings.Contains(s.Final, `"reason":"shutdown"`) {
			t.Errorf("session %+v: want cloud-init.service's, finished at shutdown", s)
		}
	}

	t.Run("without journalctl", func(t *testing.T) {
		empty := t.TempDir() // a PATH without journalctl (or anything else)
		settings["CHALUPA_AGENT_STATE_DIR"] = filepath.Join(dir, "state-nojournal")
		state = settings["CHALUPA_AGENT_STATE_DIR"]
		p := run(agentEnv(empty, settings))
		p.stop()
		log := p.log.String()
		for _, unit := range []string{"cloud-init.service", "nginx.service"} {
			if !strings.Contains(log, `"service":"`+unit+`"`) || !strings.Contains(log, "journalctl not found on PATH") || !strings.Contains(log, "log unit not shipped") {
				t.Errorf("no warning for %s; agent log:\n%s", unit, log)
			}
			if _, err := os.Stat(logship.DirFor(state, unit)); !os.IsNotExist(err) {
				t.Errorf("a spool for %s without journalctl: %v", unit, err)
			}
		}
	})
}
