package e2e

// Agent rollouts on booted machines (docs/operations.md, "Agent install",
// under Upgrade): rollouttest's scenario on three boxes converged by
// machineBoxUp, each running the real agent of the daemon's release
// (contrib/release.sh, stamped rollouttest.OldVersion) under its own
// systemd, upgraded over its real sshd by the daemon's agent rollout. The
// bad releases are rollouttest's script archives, served by the bed's TLS
// file server; the daemon is restarted with their CHALUPA_AGENT_* values
// as an operator would.

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/digitalocean/dofake/machines"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout/rollouttest"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
)

// rolloutReportSeconds is the boxes' report bound
// (CHALUPA_AGENT_UPGRADE_REPORT_SECONDS): longer than the one-minute idle
// limit and the start-up grace (60 s) together with the restart before it,
// so a bad agent's silence outlasts its box's idle deadline and only the
// upgrading hold keeps the reaper off it.
const rolloutReportSeconds = "75"

// TestMachineAgentRolloutBadReleases: two bad releases rolled out to three
// booted boxes (rollouttest.BadReleases) — one whose `version` prints the
// target version and whose `run` exits 1, one that runs and never
// heartbeats. Each time the first box fails (crashed, never reported), is
// restored and reports on the old version, and the other two are not
// tried. The boxes' own evidence agrees: on the first box the installed
// binary is the old one again (its digest and mtime), chalupa-agent.prev
// is kept beside it and the unit is active; on the other two the binary
// was never replaced (same inode, digest, mtime, no .prev) and the unit
// never restarted (same MainPID). The idle limit is one minute and an
// authenticated session keeps each box in use, so the bad agents' silence
// outlasts the first box's idle deadline: nothing is reaped (no DELETE
// with the write token, every deployment active) because the upgrading
// hold holds it.
func TestMachineAgentRolloutBadReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	releases := t.TempDir()
	var releaseURL string
	api, bed, d, fingerprint := machineDaemonOf(t, "live", rollouttest.OldVersion, func(bed *machines.Bed) map[string]string {
		releaseURL = bed.ServeTLS(8444, http.FileServer(http.Dir(releases)))
		return map[string]string{"CHALUPA_AGENT_UPGRADE_REPORT_SECONDS": rolloutReportSeconds}
	})
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	person, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := bed.AddAccountKey(strings.TrimSpace(string(ssh.MarshalAuthorizedKey(person.PublicKey())))); err != nil {
		t.Fatal(err)
	}
	cl := d.Admin()
	const env = "rollout"
	if _, err := cl.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: env}); err != nil {
		t.Fatal(err)
	}
	rb := &machineRolloutBed{t: t, bed: bed, d: d, releases: releases, releaseURL: releaseURL, xs: map[string]*machines.Box{}}
	before, start := map[string]machineAgentFile{}, time.Now()
	names := []string{"rb-1", "rb-2", "rb-3"}
	jobs := map[string]adminapi.Job{}
	for _, name := range names {
		jobs[name] = machineBoxQueue(t, cl, []string{fingerprint, ssh.FingerprintLegacyMD5(person.PublicKey())}, env, name, 1)
	}
	for _, name := range names {
		x, _ := machineBoxReady(t, cl, bed, env, name, jobs[name], rollouttest.OldVersion)
		// Someone at work on the box: its agent reports the session at
		// every heartbeat, so its idle deadline moves while it reports.
		sc, err := x.SSH(ctx, "root", person)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sc.Close() })
		sess, err := sc.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if err := sess.Start("sleep 3600"); err != nil {
			t.Fatal(err)
		}
		rb.boxes, rb.xs[name] = append(rb.boxes, name), x
		before[name] = rb.agentFile(t, x)
	}

	t.Logf("three boxes up (their ups queued at once): %v", time.Since(start).Round(100*time.Millisecond))

	rollouttest.BadReleases(t, rb)

	// Nothing was reaped: the write token destroyed nothing and every
	// machine still runs.
	if del := api.Requests(dofake.WithToken("write"), func(r dofake.Request) bool { return r.Method == http.MethodDelete }); len(del) != 0 {
		t.Errorf("DELETEs with the write token: %+v", del)
	}
	for _, name := range rb.boxes {
		if s := rb.xs[name].State(); s != machines.StateRunning {
			t.Fatalf("%s's machine is %s", name, s)
		}
	}

	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for i, name := range rb.boxes {
		x, was := rb.xs[name], before[name]
		now := rb.agentFile(t, x)
		if got, err := x.Exec(wctx, "systemctl", "is-active", "chalupa-agent"); err != nil || strings.TrimSpace(got) != "active" {
			t.Errorf("%s: the unit is %q (%v), want active", name, got, err)
		}
		if i == 0 {
			// Restored: the very binary it ran before (cp -p keeps its
			// mtime), with the previous one kept as the docs say.
			if now.sum != was.sum || now.mtime != was.mtime || !strings.Contains(now.version, rollouttest.OldVersion) {
				t.Errorf("%s after the restores: binary %+v, want the old one back %+v", name, now, was)
			}
			if now.prevSum != was.sum {
				t.Errorf("%s: %s holds %q, want the old binary (%s)", name, sshdeliver.AgentPrevious, now.prevSum, was.sum)
			}
			continue
		}
		if now != was {
			t.Errorf("%s's binary or unit changed though it was not tried: %+v, was %+v", name, now, was)
		}
	}
}

// machineRolloutBed is rollouttest's Bed over booted boxes: the daemon
// runs inside the machine bed and is restarted with each release.
type machineRolloutBed struct {
	t                    *testing.T // the test the daemon belongs to
	bed                  *machines.Bed
	d                    *proctest.Daemon
	releases, releaseURL string
	boxes                []string
	xs                   map[string]*machines.Box
}

func (b *machineRolloutBed) Admin() *adminapi.Client { return b.d.Admin() }
func (b *machineRolloutBed) Env() string             { return "rollout" }
func (b *machineRolloutBed) Boxes() []string         { return b.boxes }

// UseRelease writes the release's archive into the directory the bed's
// TLS file server serves and restarts the daemon with it as its agent
// release (docs/operations.md, "Configuration": CHALUPA_AGENT_*).
func (b *machineRolloutBed) UseRelease(t *testing.T, version string, kind rollouttest.Kind) {
	t.Helper()
	rel := rollouttest.WriteRelease(t, b.releases, version, kind)
	env := b.d.EnvCopy()
	env["CHALUPA_AGENT_VERSION"], env["CHALUPA_AGENT_RELEASE_URL"] = rel.Version, b.releaseURL
	env["CHALUPA_AGENT_SHA256_AMD64"], env["CHALUPA_AGENT_SHA256_ARM64"] = rel.SHA256["amd64"], rel.SHA256["arm64"]
	b.d.Signal(syscall.SIGTERM)
	if code := b.d.Wait(); code != 0 {
		t.Fatalf("chalupa serve exited %d on SIGTERM", code)
	}
	b.d = proctest.StartDaemon(b.t, b.bed.Wrap(proctest.BuildBinary(b.t)), env)
}

// Installed is the first line of the box's installed agent's `version`,
// run on the box.
func (b *machineRolloutBed) Installed(t *testing.T, box string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := b.xs[box].Exec(ctx, sshdeliver.AgentBinary, "version")
	if err != nil {
		return "none"
	}
	line, _, _ := strings.Cut(out, "\n")
	return line
}

// machineAgentFile is what a box shows of its installed agent: the
// binary's inode, sha256, mtime and `version`, the sha256 of the kept
// previous binary ("" for none), and the unit's MainPID.
type machineAgentFile struct {
	inode, sum, mtime, version, prevSum, mainPID string
}

func (b *machineRolloutBed) agentFile(t *testing.T, x *machines.Box) machineAgentFile {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(args ...string) string {
		t.Helper()
		out, err := x.Exec(ctx, args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	var f machineAgentFile
	f.inode, f.mtime, _ = strings.Cut(run("stat", "-c", "%i %y", sshdeliver.AgentBinary), " ")
	f.sum, _, _ = strings.Cut(run("sha256sum", sshdeliver.AgentBinary), " ")
	f.version, _, _ = strings.Cut(run(sshdeliver.AgentBinary, "version"), "\n")
	if prev := run("sh", "-c", "sha256sum "+sshdeliver.AgentPrevious+" 2>/dev/null || true"); prev != "" {
		f.prevSum, _, _ = strings.Cut(prev, " ")
	}
	f.mainPID = run("systemctl", "show", "-p", "MainPID", "--value", "chalupa-agent")
	return f
}
