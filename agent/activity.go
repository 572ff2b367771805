package agent

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/chalupa-run/chalupa/internal/lazyre"
)

// ActivitySource is one place a person's activity shows (docs/operations.md,
// "Agent"). LastActivity returns the latest activity it sees at now (the
// zero time when it sees none); an error is logged and the source counts as
// seeing nothing this check.
type ActivitySource interface {
	// Name names the source in logs and `agent status`.
	Name() string
	// LastActivity is the latest activity time visible at now.
	LastActivity(now time.Time) (time.Time, error)
}

// SSHSessions sees authenticated SSH sessions: the per-session processes
// OpenSSH's sshd starts after authentication, which it titles
// `sshd: USER@TTYS` (`sshd-session: USER@TTYS` from OpenSSH 9.8), TTYS being
// `pts/N[,pts/M…]` or `notty` (a command or a port-forward with -N). Such a
// process lives as long as its session, children included, so an open
// session counts as activity now, at every check. Pre-authentication and
// privilege-separation processes (`[preauth]`, `[net]`, `[priv]`, the
// listener) do not count, nor does a TCP connection to the SSH port that
// never authenticated: a scanner or a half-open connection is not a person
// (docs/operations.md, "Agent").
type SSHSessions struct {
	// ProcRoot is /proc (tests use a fake tree).
	ProcRoot string
}

// Name implements ActivitySource.
func (s SSHSessions) Name() string { return "ssh" }

// sshSessionTitle matches the title sshd gives an authenticated session's
// process: a user, "@", and the session's terminals or "notty".
var sshSessionTitle = lazyre.New(`^(sshd|sshd-session): [^\s@\[\]]+@(notty|[a-z]+/[0-9]+(,[a-z]+/[0-9]+)*)$`)

// sshdComm holds the executable names an sshd session process can have
// (<proc>/<pid>/comm): setting a title does not change it, so another
// program titled like a session is not one.
var sshdComm = map[string]bool{"sshd": true, "sshd-session": true}

// maxTitle bounds how much of a process's command line is read: a session
// title is a user name and a few terminals.
const maxTitle = 512

// LastActivity implements ActivitySource: now when an authenticated session
// process exists, else zero. An unreadable process (gone between the listing
// and the read, or another user's under hidepid) is skipped; an unreadable
// process table is an error.
func (s SSHSessions) LastActivity(now time.Time) (time.Time, error) {
	entries, err := os.ReadDir(s.ProcRoot)
	if err != nil {
		return time.Time{}, err
	}
	for _, e := range entries {
		if !isPID(e.Name()) {
			continue
		}
		dir := filepath.Join(s.ProcRoot, e.Name())
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || !sshdComm[strings.TrimSpace(string(comm))] {
			continue
		}
		if title, ok := processTitle(filepath.Join(dir, "cmdline")); ok && sshSessionTitle.MatchString(title) {
			return now, nil
		}
	}
	return time.Time{}, nil
}

// isPID reports whether a /proc entry names a process.
func isPID(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// processTitle reads a process's title: its command line up to the first
// NUL, without the padding a rewritten title leaves.
func processTitle(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	buf := make([]byte, maxTitle)
	n, _ := io.ReadFull(f, buf)
	b := buf[:n]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimRight(string(b), " "), n > 0
}

// TerminalInput sees terminal input: the latest access time of the pseudo
// terminals <DevRoot>/pts/* (the kernel updates a tty's atime on input).
type TerminalInput struct {
	// DevRoot is /dev (tests use a fake tree).
	DevRoot string
}

// Name implements ActivitySource.
func (TerminalInput) Name() string { return "terminal" }

// LastActivity implements ActivitySource: the latest atime of the pts
// devices (ptmx, the multiplexer, excluded), zero when there are none.
func (t TerminalInput) LastActivity(time.Time) (time.Time, error) {
	entries, err := os.ReadDir(filepath.Join(t.DevRoot, "pts"))
	if err != nil {
		if os.IsNotExist(err) {
			return time.Time{}, nil
		}
		return time.Time{}, err
	}
	var latest time.Time
	for _, e := range entries {
		if e.Name() == "ptmx" {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // closed between the listing and the stat
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		if at := time.Unix(st.Atim.Sec, st.Atim.Nsec); at.After(latest) {
			latest = at
		}
	}
	return latest, nil
}

// Observation is the reaper observation of one check.
type Observation struct {
	// LastActivityAt is the last time a person was active (UTC, whole
	// seconds).
	LastActivityAt time.Time
	// IdleChecks counts consecutive checks that saw no new activity.
	IdleChecks int64
	// CIActive is true while a CI job runs.
	CIActive bool
}

// IdleTracker turns activity sources into the reaper observation: the last
// activity only moves forward, and only when a source shows activity later
// than the last one, so heartbeats with no new activity carry the same
// lastActivityAt and never move the control plane's idle deadline.
type IdleTracker struct {
	// Sources are consulted at every check.
	Sources []ActivitySource
	// CI tells whether a CI job runs.
	CI *CIProbe
	// Warn receives a source's error (once until the source recovers).
	Warn func(source string, err error)

	last       time.Time
	idleChecks int64
	failing    map[string]bool
}

// NewIdleTracker starts tracking with last as the last activity (the agent's
// start, or the last activity a previous run recorded).
func NewIdleTracker(last time.Time, ci *CIProbe, sources ...ActivitySource) *IdleTracker {
	return &IdleTracker{Sources: sources, CI: ci, last: last.UTC().Truncate(time.Second), failing: map[string]bool{}}
}

// Check consults every source at now and returns the observation. Times
// later than now (a clock step, a touched file) count as now.
func (t *IdleTracker) Check(now time.Time) Observation {
	now = now.UTC().Truncate(time.Second)
	latest := t.Peek(now)
	if latest.After(t.last) {
		t.last = latest
		t.idleChecks = 0
	} else {
		t.idleChecks++
	}
	return Observation{LastActivityAt: t.last, IdleChecks: t.idleChecks, CIActive: t.CI.Active()}
}

// Peek returns the latest activity the sources show at now (at least the
// tracked last activity), without counting a check.
func (t *IdleTracker) Peek(now time.Time) time.Time {
	now = now.UTC().Truncate(time.Second)
	latest := t.last
	for _, s := range t.Sources {
		at, err := s.LastActivity(now)
		if err != nil {
			if !t.failing[s.Name()] && t.Warn != nil {
				t.Warn(s.Name(), err)
			}
			t.failing[s.Name()] = true
			continue
		}
		t.failing[s.Name()] = false
		at = at.UTC().Truncate(time.Second)
		if at.After(now) {
			at = now
		}
		if at.After(latest) {
			latest = at
		}
	}
	return latest
}

// LastActivity is the tracked last activity.
func (t *IdleTracker) LastActivity() time.Time { return t.last }

// CIProbe tells whether a CI job is running: while the marker file
// <RunRoot>/chalupa/ci-active exists, or a process whose name
// (<ProcRoot>/<pid>/comm) matches Pattern runs.
type CIProbe struct {
	// RunRoot is /run (tests use a fake tree).
	RunRoot string
	// ProcRoot is /proc, for the process scan.
	ProcRoot string
	// Pattern matches runner process names; nil disables the scan.
	Pattern *regexp.Regexp
}

// Active reports whether a CI job runs. A nil probe reports false.
func (c *CIProbe) Active() bool {
	if c == nil {
		return false
	}
	if _, err := os.Stat(filepath.Join(c.RunRoot, CIMarker)); err == nil {
		return true
	}
	if c.Pattern == nil {
		return false
	}
	comms, _ := filepath.Glob(filepath.Join(c.ProcRoot, "[0-9]*", "comm"))
	for _, p := range comms {
		b, err := os.ReadFile(p)
		if err == nil && c.Pattern.MatchString(strings.TrimSpace(string(b))) {
			return true
		}
	}
	return false
}

// String describes the probe for `agent status`.
func (c *CIProbe) String() string {
	if c == nil {
		return "off"
	}
	s := filepath.Join(c.RunRoot, CIMarker)
	if c.Pattern != nil {
		s += fmt.Sprintf(", processes matching %q", c.Pattern.String())
	}
	return s
}
