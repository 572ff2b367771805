package agent

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// SSHSessions sees established TCP connections to the SSH port in
// <ProcRoot>/net/tcp and tcp6: an open session counts as activity now, at
// every check, for as long as it stays open.
type SSHSessions struct {
	// ProcRoot is /proc (tests use a fake tree).
	ProcRoot string
	// Port is the SSH port (DefaultSSHPort).
	Port int
}

// Name implements ActivitySource.
func (s SSHSessions) Name() string { return "ssh" }

// LastActivity implements ActivitySource: now when a connection to the SSH
// port is established, else zero. A missing tcp6 table (IPv6 off) is not an
// error; a missing tcp table is.
func (s SSHSessions) LastActivity(now time.Time) (time.Time, error) {
	n, err := countEstablished(filepath.Join(s.ProcRoot, "net", "tcp"), s.Port)
	if err != nil {
		return time.Time{}, err
	}
	n6, err := countEstablished(filepath.Join(s.ProcRoot, "net", "tcp6"), s.Port)
	if err != nil && !os.IsNotExist(err) {
		return time.Time{}, err
	}
	if n+n6 > 0 {
		return now, nil
	}
	return time.Time{}, nil
}

// tcpEstablished is the kernel's TCP_ESTABLISHED state in /proc/net/tcp.
const tcpEstablished = "01"

// countEstablished counts the established connections in a /proc/net/tcp
// style table whose local port is port.
func countEstablished(path string, port int) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for first := true; sc.Scan(); first = false {
		if first {
			continue // the header line
		}
		// sl local_address rem_address st ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != tcpEstablished {
			continue
		}
		i := strings.LastIndexByte(fields[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(fields[1][i+1:], 16, 16)
		if err == nil && int(p) == port {
			n++
		}
	}
	return n, sc.Err()
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
