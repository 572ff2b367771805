// Package rollouttest is the agent rollout's test bed and its scenario
// (docs/operations.md, "Agent install", under Upgrade). The scenario
// (BadReleases) asks a Bed for boxes, a release and the boxes' own
// evidence; this package's Bed pieces are fake droplets (Droplet: the
// fake sshd of sshdtest whose systemctl runs the installed agent script as
// the unit and whose curl reads a local release directory, and Relay,
// which turns a running agent's beats into signed heartbeats). A bed of
// booted machines implements the same Bed with real droplets and the
// real agent, and runs the same scenario.
package rollouttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver/sshdtest"
)

// Kind is what a release's agent does.
type Kind int

// The releases the scenario rolls out.
const (
	// Good: `version` and `run` work; the agent heartbeats with its
	// version.
	Good Kind = iota
	// ExitsOnRun: `version` prints the release's version, `run` exits 1
	// at once (the unit fails; systemd would restart it in vain).
	ExitsOnRun
	// NeverReports: `run` runs and never heartbeats.
	NeverReports
)

// OldVersion is the agent every box runs before the scenario.
const OldVersion = "v1.0.0"

// Bed is what the scenario needs of a bed of boxes.
type Bed interface {
	// Admin is the daemon's admin client (its base URL may change after
	// UseRelease).
	Admin() *adminapi.Client
	// Env is the environment the boxes belong to.
	Env() string
	// Boxes names the environment's boxes, in `box list` order, each
	// with a running droplet whose agent runs OldVersion and heartbeats.
	Boxes() []string
	// UseRelease makes a release of version whose agent does what kind
	// says the daemon's agent release (CHALUPA_AGENT_*).
	UseRelease(t *testing.T, version string, kind Kind)
	// Installed is the first line of the box's installed agent's
	// `version`, read on the box.
	Installed(t *testing.T, box string) string
}

// script is an agent archive's chalupa-agent: `version` prints version,
// `run` does what kind says; a running agent beats by writing its version
// into $BEAT every 200 ms (the fake droplet's heartbeat, Relay's source).
func script(version string, kind Kind) string {
	run := `while :; do echo '` + version + `' > "$BEAT"; sleep 0.2; done`
	switch kind {
	case ExitsOnRun:
		run = "exit 1"
	case NeverReports:
		run = "exec sleep 3600"
	}
	return "#!/bin/sh\ncase \"$1\" in\nversion) echo 'chalupa-agent " + version + " (commit rollouttest)';;\nrun) " + run + ";;\n*) exit 2;;\nesac\n"
}

// Archive is a release archive as contrib/release.sh builds it (one file,
// chalupa-agent, 0755) holding the agent script of version and kind.
func Archive(t testing.TB, version string, kind Kind) []byte {
	t.Helper()
	return archive(t, []byte(script(version, kind)))
}

// archive is a release archive holding body as chalupa-agent.
func archive(t testing.TB, body []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "chalupa-agent", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(tw.Close(), gz.Close()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ReleaseBase is the release URL fake droplets' curl maps to their
// release directory: a name that resolves nowhere, so nothing leaves the
// machine.
const ReleaseBase = "https://releases.invalid/chalupa-agent"

// WriteRelease writes version's archives (both architectures the same
// archive, as a script runs on both) into dir, where fake droplets' curl
// finds them, and returns the release with their digest: URL
// ReleaseBase/version.
func WriteRelease(t testing.TB, dir, version string, kind Kind) agentrelease.Release {
	t.Helper()
	return writeRelease(t, dir, version, Archive(t, version, kind))
}

// WriteBinaryRelease is WriteRelease of a built agent binary (bin, stamped
// with version): the real agent, whose heartbeats carry its version.
func WriteBinaryRelease(t testing.TB, dir, version, bin string) agentrelease.Release {
	t.Helper()
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return writeRelease(t, dir, version, archive(t, body))
}

func writeRelease(t testing.TB, dir, version string, arc []byte) agentrelease.Release {
	t.Helper()
	for _, a := range agentrelease.Arches {
		if err := os.WriteFile(filepath.Join(dir, agentrelease.ArchiveName(version, a)), arc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256(arc)
	d := hex.EncodeToString(sum[:])
	return agentrelease.Release{Version: version, URL: ReleaseBase + "/" + version, SHA256: map[string]string{"amd64": d, "arm64": d}}
}

// Droplet is a fake droplet: sshdtest's server at its own address with
// the agent's paths under a root, a systemctl that runs the installed
// agent as the unit (restart stops the running agent, waiting for its
// exit as systemd does, then starts `chalupa-agent run` in the
// background, is-active says whether it lives, show says 0 restarts), and
// a curl that copies an archive from the release directory by its name.
type Droplet struct {
	// Server is the droplet's sshd.
	Server *sshdtest.Server
	// ID is its droplet id.
	ID    int64
	state string
	bin   string
}

// State is the droplet's own directory (outside the agent's root): a
// place for the agent's key files and spool.
func (d *Droplet) State() string { return d.state }

// Install replaces the installed agent with the binary at bin, its unit's
// settings with env (the unit's EnvironmentFile: agent.env), and restarts
// the unit: a droplet whose first boot installed that agent.
func (d *Droplet) Install(t *testing.T, bin string, env map[string]string) {
	t.Helper()
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Server.AgentBinary(), body, 0o755); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for k, v := range env {
		lines = append(lines, k+"='"+v+"'")
	}
	if err := os.WriteFile(filepath.Join(d.state, "agent.env"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.systemctl(t, d.bin, "restart", "chalupa-agent.service")
}

// Log is what the agent processes wrote (their standard output and
// error), for a failing test.
func (d *Droplet) Log() string {
	b, _ := os.ReadFile(filepath.Join(d.state, "agent.log"))
	return string(b)
}

// NewDroplet starts a fake droplet at addr accepting authorized, running
// agent OldVersion (started), with curl reading releases.
func NewDroplet(t *testing.T, addr string, id int64, authorized ssh.PublicKey, releases string) *Droplet {
	t.Helper()
	srv := sshdtest.NewAt(t, addr, sshdtest.NewSigner(t), authorized)
	srv.Root = t.TempDir()
	d := &Droplet{Server: srv, ID: id, state: t.TempDir()}
	bin := t.TempDir()
	systemctl := `#!/bin/sh
state='` + d.state + `'; bin='` + srv.AgentBinary() + `'
echo "$*" >> "$state/systemctl.log"
alive() { [ -f "$state/pid" ] && p=$(cat "$state/pid") && kill -0 "$p" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; }
case "$1" in
restart)
  # As systemd does: stop (SIGTERM, wait for the exit, SIGKILL after 30 s),
  # then start. Starting beside a stopping agent ran two on one spool: the
  # new one's start met the old one's final window mid-rename and exited.
  if [ -f "$state/pid" ]; then
    kill "$(cat "$state/pid")" 2>/dev/null; i=0
    while alive && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
    if alive; then kill -9 "$(cat "$state/pid")" 2>/dev/null; fi
  fi
  rm -f "$state/beat"
  if [ -f "$state/agent.env" ]; then set -a; . "$state/agent.env"; set +a; fi
  BEAT="$state/beat" "$bin" run </dev/null >>"$state/agent.log" 2>&1 &
  echo $! > "$state/pid";;
is-active) if alive; then echo active; else echo failed; exit 3; fi;;
show) echo 0;;
esac
`
	curl := `#!/bin/sh
out=''; url=''
while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift 2;; --max-time|--proto) shift 2;; -*) shift;; *) url=$1; shift;; esac; done
cp '` + releases + `'/"$(basename "$url")" "$out" 2>/dev/null || exit 22
`
	for name, body := range map[string]string{"systemctl": systemctl, "curl": curl} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	srv.Path = []string{bin}
	if err := os.MkdirAll(filepath.Dir(srv.AgentBinary()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(srv.AgentBinary(), []byte(script(OldVersion, Good)), 0o755); err != nil {
		t.Fatal(err)
	}
	d.bin = bin
	d.systemctl(t, bin, "restart", "chalupa-agent.service")
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(d.state, "pid")); err == nil {
			if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				if proc, err := os.FindProcess(p); err == nil {
					_ = proc.Kill()
				}
			}
		}
	})
	return d
}

func (d *Droplet) systemctl(t *testing.T, bin string, args ...string) {
	t.Helper()
	if out, err := exec.Command(filepath.Join(bin, "systemctl"), args...).CombinedOutput(); err != nil {
		t.Fatalf("systemctl %v: %v %s", args, err, out)
	}
}

// Installed is the first line of the installed agent's `version`.
func (d *Droplet) Installed(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(d.Server.AgentBinary(), "version").Output()
	if err != nil {
		return "none"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return line
}

// Beat is the version the running agent last beat with, when it beat
// within the last second.
func (d *Droplet) Beat() (string, bool) {
	p := filepath.Join(d.state, "beat")
	fi, err := os.Stat(p)
	if err != nil || time.Since(fi.ModTime()) > time.Second {
		return "", false
	}
	b, err := os.ReadFile(p)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return "", false
	}
	return string(bytes.TrimSpace(b)), true
}

// RelayInterval is how often Relay looks at each droplet's beat.
const RelayInterval = 300 * time.Millisecond

// Relay sends, every RelayInterval until ctx ends, a signed heartbeat for
// each droplet whose agent beats, as that agent would: its deployment
// droplet-<id>, its version as agentVersion "chalupa-agent/<version>",
// signed with key, to the daemon at base().
func Relay(ctx context.Context, base func() string, key adminapi.IssuedKey, env string, drops []*Droplet) error {
	raw, err := protocol.DecodeKeyMaterial(key.KeyMaterial)
	if err != nil {
		return err
	}
	for {
		for _, d := range drops {
			v, ok := d.Beat()
			if !ok {
				continue
			}
			now := time.Now().UTC()
			body, _ := json.Marshal(protocol.HeartbeatV1{EnvironmentSlug: env,
				Deployment:   protocol.HeartbeatDeploy{ID: fmt.Sprintf("droplet-%d", d.ID), DropletID: d.ID},
				AgentVersion: "chalupa-agent/" + v, SentAt: now,
				Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now.Add(-time.Second)}})
			c := &protocol.Client{BaseURL: base(), KeyID: key.KeyID, Key: raw}
			// A refusal or a daemon between restarts: the next beat
			// sends again, as the agent's spool would.
			_, _ = c.Post(ctx, ingest.HeartbeatRoute, body)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(RelayInterval):
		}
	}
}
