package sshdeliver

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
)

// Agent upgrade over SSH (docs/operations.md, "Agent install", under Upgrade).
const (
	// AgentBinary is the agent's binary on a droplet, which the upgrade
	// replaces.
	AgentBinary = "/usr/local/bin/chalupa-agent"
	// AgentPrevious is where the upgrade keeps the binary it replaces,
	// and what a restore puts back over AgentBinary.
	AgentPrevious = AgentBinary + ".prev"
	// AgentUnit is the systemd unit the upgrade restarts.
	AgentUnit = "chalupa-agent.service"
	// UpgradeWait bounds the wait for a running droplet's SSH: unlike a new
	// droplet it answers at once, so a minute of silence is a firewall or
	// a dead machine, and the admin call must not hang for the 5 minutes a
	// boot gets.
	UpgradeWait = time.Minute
	// UpgradeTimeout bounds the remote upgrade (download, verify, replace,
	// restart): the archive is a few MiB, so two minutes covers a slow
	// mirror while keeping the admin call bounded.
	UpgradeTimeout = 3 * time.Minute
	// downloadSeconds is curl's own bound on the download, inside
	// UpgradeTimeout.
	downloadSeconds = 120
)

// Errors of UpgradeAgent, by the remote script's exit code; none carries a
// URL, a digest or an address.
var (
	// ErrUpgradeArch: the droplet's `uname -m` is no architecture the
	// release carries.
	ErrUpgradeArch = errors.New("the droplet's architecture has no agent archive")
	// ErrUpgradeDownload: the archive could not be downloaded.
	ErrUpgradeDownload = errors.New("downloading the agent archive failed")
	// ErrUpgradeDigest: the archive's sha256 differs from the pinned one;
	// nothing was replaced.
	ErrUpgradeDigest = errors.New("the agent archive's sha256 does not match the release's; nothing was replaced")
	// ErrUpgradeArchive: the archive holds no runnable chalupa-agent;
	// nothing was replaced.
	ErrUpgradeArchive = errors.New("the agent archive holds no runnable chalupa-agent; nothing was replaced")
	// ErrUpgradeReplace: replacing the binary failed (the old one stays).
	ErrUpgradeReplace = errors.New("replacing the agent binary failed")
	// ErrUpgradeRestart: the binary was replaced but restarting the unit
	// failed.
	ErrUpgradeRestart = errors.New("the agent binary was replaced but restarting chalupa-agent.service failed")
	// ErrUpgradeNoAgent: the droplet has no agent to upgrade (its user
	// data installed none: the box's agent was turned on after the
	// droplet was created, or the first-boot install failed); nothing was
	// downloaded or replaced.
	ErrUpgradeNoAgent = errors.New("the droplet has no agent installed (its first boot installed none); nothing was replaced: replace the droplet to install the agent")
	// ErrUpgradeInstalled: the droplet already runs the release's version;
	// nothing was downloaded, replaced or restarted.
	ErrUpgradeInstalled = errors.New("the droplet already runs this agent version; nothing was downloaded or restarted")
	// ErrRestoreNoPrevious: the droplet keeps no previous agent binary
	// (chalupa-agent.prev) to restore; nothing was replaced.
	ErrRestoreNoPrevious = errors.New("the droplet keeps no previous agent binary (chalupa-agent.prev); nothing was restored")
	// ErrRestorePrevious: the previous binary does not answer `version`;
	// nothing was replaced.
	ErrRestorePrevious = errors.New("the previous agent binary does not run; nothing was restored")
	// ErrUpgrade: the remote upgrade failed otherwise.
	ErrUpgrade = errors.New("the agent upgrade over SSH failed")
)

// exitErrors maps UpgradeScript's exit codes to errors.
var exitErrors = map[int]error{10: ErrUpgradeArch, 11: ErrUpgradeDownload, 12: ErrUpgradeDigest,
	13: ErrUpgradeArchive, 14: ErrUpgradeReplace, 15: ErrUpgradeRestart, 16: ErrUpgradeNoAgent, 17: ErrUpgradeInstalled,
	20: ErrRestoreNoPrevious, 21: ErrRestorePrevious}

// UpgradeResult says what an upgrade found and left.
type UpgradeResult struct {
	// Arch is the architecture the droplet reported (amd64 or arm64).
	Arch string
	// Before and After are `chalupa-agent version`'s first line before
	// and after ("none" when no agent binary was there).
	Before, After string
	// HostKeyFingerprint is the droplet's pinned host key (SHA256 form).
	HostKeyFingerprint string
}

// UpgradeAgent replaces the agent on the droplet at addr with release rel
// over SSH, with chalupa's identity and the droplet's pinned host key (the
// first contact pins it), waiting up to UpgradeWait for SSH. The remote
// script (UpgradeScript) picks the archive by `uname -m`, verifies its
// sha256 before anything is replaced, keeps the running binary as
// AgentPrevious, replaces AgentBinary atomically and restarts AgentUnit.
// A droplet that already runs rel.Version is left alone:
// ErrUpgradeInstalled, nothing downloaded or restarted. rel must have
// passed agentrelease.Release.Check (the caller's rule). Errors:
// ErrUnreachable, ErrHostKeyChanged, ErrAuth, the ErrUpgrade* kinds; none
// carries the address or the release URL.
func (d *Deliverer) UpgradeAgent(ctx context.Context, addr string, dropletID int64, rel agentrelease.Release) (UpgradeResult, error) {
	var res UpgradeResult
	client, fp, err := d.dialUpgrade(ctx, addr, dropletID)
	if err != nil {
		return res, err
	}
	defer client.Close()
	res.HostKeyFingerprint = fp
	out, err := d.runScript(ctx, client, dropletID, UpgradeScript(rel))
	res.Arch, res.Before, res.After = out["arch"], out["before"], out["after"]
	return res, err
}

// RestoreResult says what RestoreAgent found and left.
type RestoreResult struct {
	// State is `systemctl is-active` of AgentUnit before the restore
	// (active, activating, failed, inactive …; "unknown" when it said
	// nothing) and Restarts the unit's NRestarts: systemd's automatic
	// restarts, each one a crash of the agent.
	State    string
	Restarts int
	// Replaced is the first line of the `version` of the binary the
	// restore replaced ("none" when it gave none); Restored that of
	// AgentPrevious, now AgentBinary again.
	Replaced, Restored string
	// HostKeyFingerprint is the droplet's pinned host key (SHA256 form).
	HostKeyFingerprint string
}

// Crashed reports whether the unit was not running, or systemd had
// restarted it, when the restore looked: the agent exited on its own.
func (r RestoreResult) Crashed() bool { return r.State != "active" || r.Restarts > 0 }

// RestoreAgent puts AgentPrevious back over AgentBinary on the droplet at
// addr and restarts AgentUnit (RestoreScript), after reporting the unit's
// state; it waits for SSH as UpgradeAgent does. Errors: ErrUnreachable,
// ErrHostKeyChanged, ErrAuth, ErrRestoreNoPrevious, ErrRestorePrevious,
// ErrUpgradeReplace, ErrUpgradeRestart, ErrUpgrade; none carries the
// address.
func (d *Deliverer) RestoreAgent(ctx context.Context, addr string, dropletID int64) (RestoreResult, error) {
	var res RestoreResult
	client, fp, err := d.dialUpgrade(ctx, addr, dropletID)
	if err != nil {
		return res, err
	}
	defer client.Close()
	res.HostKeyFingerprint = fp
	out, err := d.runScript(ctx, client, dropletID, RestoreScript())
	res.State, res.Replaced, res.Restored = cmp.Or(out["state"], "unknown"), out["replaced"], out["restored"]
	res.Restarts, _ = strconv.Atoi(out["restarts"])
	return res, err
}

// dialUpgrade connects to the droplet at addr with chalupa's identity,
// retrying for up to UpgradeWait, and returns the client and the pinned
// host key's fingerprint.
func (d *Deliverer) dialUpgrade(ctx context.Context, addr string, dropletID int64) (*ssh.Client, string, error) {
	signer, err := Signer(ctx, d.db.Read, d.sealer)
	if err != nil {
		return nil, "", err
	}
	wait := d.UpgradeWait
	if wait == 0 {
		wait = UpgradeWait
	}
	deadline := d.clock.Now().Add(wait)
	var dr Result
	for {
		dr.Attempts++
		client, _, err := d.connect(ctx, addr, dropletID, signer, &dr)
		if err == nil {
			return client, dr.HostKeyFingerprint, nil
		}
		if retryable(err) && ctx.Err() != nil {
			// Cancelled mid-attempt: the net error names the address.
			return nil, "", fmt.Errorf("%w on droplet %d: %w while waiting for SSH (%s)", ErrUnreachable, dropletID, ctx.Err(), errKind(err))
		}
		if !retryable(err) {
			return nil, "", err
		}
		if !d.clock.Now().Before(deadline) {
			return nil, "", fmt.Errorf("%w within %s on droplet %d (%d attempts; last: %v)", ErrUnreachable, wait, dropletID, dr.Attempts, errKind(err))
		}
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-d.clock.After(d.Retry):
		}
	}
}

// runScript runs script on client within UpgradeTimeout and returns its
// key=value lines (values clipped); a non-zero exit is the error of
// exitErrors, else ErrUpgrade with the status.
func (d *Deliverer) runScript(ctx context.Context, client *ssh.Client, dropletID int64, script string) (map[string]string, error) {
	out := map[string]string{}
	sess, err := client.NewSession()
	if err != nil {
		return out, fmt.Errorf("%w (droplet %d): %v", ErrUpgrade, dropletID, errKind(err))
	}
	defer sess.Close()
	var stdout bytes.Buffer
	sess.Stdout = &stdout
	done := make(chan error, 1)
	go func() { done <- sess.Run(script) }()
	uctx, cancel := context.WithTimeout(ctx, UpgradeTimeout)
	defer cancel()
	select {
	case err = <-done:
	case <-uctx.Done():
		client.Close()
		return out, fmt.Errorf("%w (droplet %d): timed out", ErrUpgrade, dropletID)
	}
	for sc := bufio.NewScanner(&stdout); sc.Scan(); {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = clip(v)
		}
	}
	if err != nil {
		var ee *ssh.ExitError
		if errors.As(err, &ee) {
			if kind, ok := exitErrors[ee.ExitStatus()]; ok {
				return out, fmt.Errorf("%w (droplet %d)", kind, dropletID)
			}
			return out, fmt.Errorf("%w (droplet %d): exit status %d", ErrUpgrade, dropletID, ee.ExitStatus())
		}
		return out, fmt.Errorf("%w (droplet %d): %v", ErrUpgrade, dropletID, errKind(err))
	}
	return out, nil
}

// clip bounds a version line the droplet reported to 100 printable bytes.
func clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}

// shellQuote quotes s for sh in single quotes.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// UpgradeScript is the remote command of an agent upgrade
// (docs/operations.md, "Agent install"): pick the archive by `uname -m`,
// stop with nothing downloaded when the installed agent's `version` is
// already rel.Version, download it into a directory beside AgentBinary,
// verify its sha256 and stop with nothing replaced when it differs, unpack
// chalupa-agent and run its `version`, keep the running binary as
// AgentPrevious, rename the new one over AgentBinary (atomic: the same file
// system), restart AgentUnit. It prints arch=, before= and after= lines and
// exits 10 (architecture), 11 (download), 12 (digest), 13 (archive), 14
// (replace), 15 (restart), 16 (no agent installed: nothing downloaded) or
// 17 (this version installed: nothing downloaded). Every value is
// single-quoted.
func UpgradeScript(rel agentrelease.Release) string {
	bin := AgentBinary
	dir := bin[:strings.LastIndex(bin, "/")]
	return strings.Join([]string{
		"set -uf",
		"umask 022",
		"case \"$(uname -m)\" in" +
			" x86_64|amd64) arch=amd64; sum=" + shellQuote(rel.SHA256["amd64"]) + "; url=" + shellQuote(rel.ArchiveURL("amd64")) + ";;" +
			" aarch64|arm64) arch=arm64; sum=" + shellQuote(rel.SHA256["arm64"]) + "; url=" + shellQuote(rel.ArchiveURL("arm64")) + ";;" +
			" *) exit 10;; esac",
		"echo \"arch=$arch\"",
		"before=$(" + bin + " version 2>/dev/null | head -n 1) || before=''",
		"echo \"before=${before:-none}\"",
		// No agent to upgrade: a binary alone, without the unit and
		// settings the first boot writes, would never run.
		"[ -n \"$before\" ] || exit 16",
		// `version` prints "chalupa-agent VERSION (commit …)": the same
		// version is a no-op, not a download and a restart. The line is
		// split into words on purpose (set -f: no globbing).
		"# shellcheck disable=SC2086",
		"set -- $before",
		"[ \"${2:-}\" != " + shellQuote(rel.Version) + " ] || exit 17",
		"install -d -m 0755 " + dir + " || exit 14",
		"tmp=$(mktemp -d " + dir + "/.chalupa-agent-upgrade.XXXXXX) || exit 14",
		"trap 'rm -rf \"$tmp\"' EXIT",
		"curl --fail --silent --show-error --location --proto '=https,http' --max-time " + fmt.Sprint(downloadSeconds) +
			" -o \"$tmp/agent.tar.gz\" \"$url\" 2>/dev/null || exit 11",
		"echo \"$sum  $tmp/agent.tar.gz\" | sha256sum -c --status - || exit 12",
		"tar -xzf \"$tmp/agent.tar.gz\" -C \"$tmp\" chalupa-agent 2>/dev/null || exit 13",
		"chmod 0755 \"$tmp/chalupa-agent\" || exit 13",
		"after=$(\"$tmp/chalupa-agent\" version 2>/dev/null | head -n 1) && [ -n \"$after\" ] || exit 13",
		// The running binary stays as AgentPrevious (copied, then renamed
		// into place, so a half-written copy is never the previous one):
		// what a restore puts back.
		"cp -p " + bin + " \"$tmp/prev\" && mv -f \"$tmp/prev\" " + AgentPrevious + " || exit 14",
		"mv -f \"$tmp/chalupa-agent\" " + bin + " || exit 14",
		"echo \"after=$after\"",
		"systemctl restart " + AgentUnit + " || exit 15",
	}, "\n")
}

// RestoreScript is the remote command of a restore (docs/operations.md,
// "Agent install", under Upgrade): print the unit's state= and restarts=
// (NRestarts) as they are, the replaced= binary's version, check that
// AgentPrevious runs (`version`, printed as restored=), copy it over
// AgentBinary (a copy renamed into place: AgentPrevious stays) and restart
// AgentUnit. It exits 20 (no previous binary), 21 (the previous binary
// does not run), 14 (replace) or 15 (restart).
func RestoreScript() string {
	bin := AgentBinary
	return strings.Join([]string{
		"set -u",
		"umask 022",
		"echo \"state=$(systemctl is-active " + AgentUnit + " 2>/dev/null)\"",
		"echo \"restarts=$(systemctl show -p NRestarts --value " + AgentUnit + " 2>/dev/null)\"",
		"replaced=$(" + bin + " version 2>/dev/null | head -n 1) || replaced=''",
		"echo \"replaced=${replaced:-none}\"",
		"[ -f " + AgentPrevious + " ] || exit 20",
		"restored=$(" + AgentPrevious + " version 2>/dev/null | head -n 1) && [ -n \"$restored\" ] || exit 21",
		"echo \"restored=$restored\"",
		"cp -p " + AgentPrevious + " " + bin + ".restore && mv -f " + bin + ".restore " + bin + " || exit 14",
		"systemctl restart " + AgentUnit + " || exit 15",
	}, "\n")
}
