package machines

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
)

// Box states (Box.State).
const (
	// StateRunning: the machine runs (or is booting again after a reboot).
	StateRunning = "running"
	// StateOff: the machine stopped by itself (poweroff, a crash); the
	// droplet shows "off" and the box stays until the droplet is deleted.
	StateOff = "off"
	// StateRemoved: the droplet was deleted (or the test ended): the
	// machine is powered off, its overlay, namespace and cgroups are gone.
	StateRemoved = "removed"
)

// rebootExit is systemd-nspawn's exit code when the machine rebooted.
const rebootExit = 133

// cloudConfig is the bed's cloud-init settings, in every box's overlay:
// NoCloud only (no cloud probes); root keeps the droplet's keys, as
// DigitalOcean's images do (Debian's default prefixes them with a refusal);
// the network is the bed's (made before boot), not cloud-init's; C.UTF-8,
// the one locale a minbase tree has, so the locale module succeeds and
// `cloud-init status` can say done.
const cloudConfig = `datasource_list: [ NoCloud, None ]
disable_root: false
network: {config: disabled}
manage_etc_hosts: false
locale: C.UTF-8
`

// Box is the machine behind one droplet.
type Box struct {
	// Droplet is the droplet as created (its id, name, region, user data).
	Droplet dofake.Droplet
	// Name is the machine's name ("<prefix>-<n>"): its network namespace,
	// its veth's host side, its cgroups and systemd-nspawn's -M.
	Name string
	// Addr is the box's address, the droplet's public IPv4; Gateway is
	// the host side of its veth, in the private namespace.
	Addr, Gateway netip.Addr

	bed     *Bed
	keys    []string
	dir     string // run dir/<n>: upper, work, merged, console.log
	cgroups []string

	mu         sync.Mutex
	cmd        *exec.Cmd
	state      string
	destroying bool
	boots      int
	bootedAt   time.Time
	metaReads  []string
	changed    chan struct{} // closed and replaced on every change
	removed    chan struct{}
}

func newBox(b *Bed, n int, d dofake.Droplet, keys []string) *Box {
	base := boxBase.As4()
	off := 4 * n
	base[2] += byte(off / 256)
	base[3] += byte(off % 256)
	net0 := netip.AddrFrom4(base)
	gw := net0.Next()
	return &Box{
		Droplet: d, Name: fmt.Sprintf("%s-%d", b.prefix, n), Addr: gw.Next(), Gateway: gw,
		bed: b, keys: keys, dir: filepath.Join(b.dir, strconv.Itoa(n)),
		state: StateRunning, changed: make(chan struct{}), removed: make(chan struct{}),
	}
}

// State is the box's state: StateRunning, StateOff or StateRemoved.
func (x *Box) State() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.state
}

// Boots is how many times the machine has booted (1 after the create,
// one more for each reboot).
func (x *Box) Boots() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.boots
}

// BootedAt is when the machine's latest boot started (systemd-nspawn ran).
func (x *Box) BootedAt() time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.bootedAt
}

// MetadataReads lists the metadata items the box asked for ("id",
// "region", …), in order.
func (x *Box) MetadataReads() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.metaReads...)
}

// Console is what the machine wrote to its console (systemd's and
// cloud-init's boot messages), every boot.
func (x *Box) Console() string {
	b, _ := os.ReadFile(filepath.Join(x.dir, "console.log"))
	return string(b)
}

// CutControlPlane cuts the box off from ControlAddr (on true) or restores
// its way there (on false): a route of type unreachable to ControlAddr/32
// in the box's network namespace, so the daemon behind the TLS front, and
// whatever ServeTLS serves, cannot be reached from the box — the control
// plane unreachable from one droplet (docs/operations.md, "Agent"), every
// other box untouched. A new connection fails at once with "no route to
// host"; one already open stalls until its own timeout, as across a real
// outage. The namespace outlives the machine's reboots, and so does the
// cut. Cutting a cut box or restoring an uncut one does nothing. Errors:
// the box was removed, or ip failed.
func (x *Box) CutControlPlane(on bool) error {
	if x.State() == StateRemoved {
		return fmt.Errorf("box %s is removed", x.Name)
	}
	dst := ControlAddr.String() + "/32"
	if on {
		return ip("-n", x.Name, "route", "replace", "unreachable", dst)
	}
	if err := ip("-n", x.Name, "route", "del", "unreachable", dst); err != nil && !strings.Contains(err.Error(), "No such process") {
		return err
	}
	return nil
}

// WaitState waits until the box is in state or ctx ends. Errors: ctx's,
// with the state it was in.
func (x *Box) WaitState(ctx context.Context, state string) error {
	for {
		x.mu.Lock()
		cur, ch := x.state, x.changed
		x.mu.Unlock()
		if cur == state {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("box %s is %s, not %s: %w", x.Name, cur, state, ctx.Err())
		}
	}
}

// WaitBoots waits until the machine has booted n times or ctx ends.
func (x *Box) WaitBoots(ctx context.Context, n int) error {
	for {
		x.mu.Lock()
		cur, ch := x.boots, x.changed
		x.mu.Unlock()
		if cur >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("box %s booted %d times, not %d: %w", x.Name, cur, n, ctx.Err())
		}
	}
}

// WaitRemoved waits until the box is removed (StateRemoved) or ctx ends.
func (x *Box) WaitRemoved(ctx context.Context) error {
	select {
	case <-x.removed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("box %s is %s: %w", x.Name, x.State(), ctx.Err())
	}
}

// Exec runs args inside the running machine (all its namespaces, through
// nsenter into its PID 1) and returns the combined output. It waits for
// PID 1 to exist. Errors: the machine is not running, ctx ends, or the
// command fails (the error carries its output).
func (x *Box) Exec(ctx context.Context, args ...string) (string, error) {
	pid, err := x.leader(ctx)
	if err != nil {
		return "", err
	}
	nsargs := append([]string{"-t", strconv.Itoa(pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w", "--"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", nsargs...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=/root"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s in box %s: %w: %s", strings.Join(args, " "), x.Name, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// WaitCloudInit runs `cloud-init status --wait --long` inside the box and
// returns its output; it fails unless cloud-init says "status: done".
func (x *Box) WaitCloudInit(ctx context.Context) (string, error) {
	out, err := x.Exec(ctx, "cloud-init", "status", "--wait", "--long")
	if err != nil {
		return out, err
	}
	if !strings.Contains(out, "status: done") {
		return out, fmt.Errorf("cloud-init in box %s: %s", x.Name, strings.TrimSpace(out))
	}
	return out, nil
}

// SSH connects to the box's sshd as user with signer, retrying until sshd
// answers the handshake (a booting machine refuses connections) or ctx
// ends. The host key is not checked: the box is the test's own.
func (x *Box) SSH(ctx context.Context, user string, signer ssh.Signer) (*ssh.Client, error) {
	cfg := &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}
	addr := net.JoinHostPort(x.Addr.String(), "22")
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := x.bed.Dial(ctx, addr)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(cfg.Timeout))
			sc, chans, reqs, herr := ssh.NewClientConn(c, addr, cfg)
			if herr == nil {
				_ = c.SetDeadline(time.Time{})
				return ssh.NewClient(sc, chans, reqs), nil
			}
			c.Close()
			err = herr
			var se *ssh.ServerAuthError
			if errors.As(herr, &se) || strings.Contains(herr.Error(), "unable to authenticate") {
				return nil, fmt.Errorf("ssh %s@%s: %w", user, addr, herr)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ssh %s@%s: %w (last: %v)", user, addr, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// leader returns the pid of the machine's PID 1: the descendant of
// systemd-nspawn in another PID namespace. It waits for it to appear.
func (x *Box) leader(ctx context.Context) (int, error) {
	self, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return 0, err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		x.mu.Lock()
		st, cmd := x.state, x.cmd
		x.mu.Unlock()
		if st != StateRunning || cmd == nil || cmd.Process == nil {
			return 0, fmt.Errorf("box %s is %s", x.Name, st)
		}
		for _, pid := range descendants(cmd.Process.Pid) {
			if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && ns != self {
				return pid, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("box %s: no PID 1 yet: %w", x.Name, ctx.Err())
		case <-tick.C:
		}
	}
}

// descendants lists root's descendants, breadth first, from /proc.
func descendants(root int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// prepare writes the box's upper layer, mounts its overlay, makes its
// network namespace and veth, and its cgroups.
func (x *Box) prepare() error {
	upper, work, merged := filepath.Join(x.dir, "upper"), filepath.Join(x.dir, "work"), filepath.Join(x.dir, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		// Chmod, which the umask does not touch: the box's / takes the
		// upper layer's mode (see upperDirs).
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	meta, err := json.Marshal(map[string]any{ // JSON is YAML: cloud-init reads it
		"instance-id": strconv.Itoa(x.Droplet.ID), "local-hostname": x.Droplet.Name,
		"public-keys": append([]string{}, x.keys...),
	})
	if err != nil {
		return err
	}
	bundle, err := os.ReadFile(filepath.Join(x.bed.rootfs, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil {
		return fmt.Errorf("the root filesystem's CA bundle: %w", err)
	}
	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{"etc/cloud/cloud.cfg.d/90-chalupa-testbed.cfg", []byte(cloudConfig), 0o644},
		{"var/lib/cloud/seed/nocloud/meta-data", append(meta, '\n'), 0o600},
		{"var/lib/cloud/seed/nocloud/user-data", []byte(x.Droplet.UserData), 0o600},
		// Empty: systemd makes the machine its own id at boot.
		{"etc/machine-id", nil, 0o444},
		// The test CA as an image trusts a public one: in the system bundle
		// Go, curl and OpenSSL read, and where update-ca-certificates
		// keeps it.
		{"usr/local/share/ca-certificates/chalupa-test-ca.crt", x.bed.caPEM, 0o644},
		{"etc/ssl/certs/ca-certificates.crt", append(bundle, x.bed.caPEM...), 0o644},
	}
	for _, f := range files {
		p := filepath.Join(upper, f.path)
		if err := upperDirs(upper, filepath.Dir(f.path)); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", x.bed.rootfs, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount the overlay: %w", err)
	}
	p := x.bed.prefix
	for _, args := range [][]string{
		{"netns", "add", x.Name},
		{"-n", p, "link", "add", x.Name, "type", "veth", "peer", "name", "host0", "netns", x.Name},
		{"-n", x.Name, "link", "set", "lo", "up"},
		{"-n", x.Name, "addr", "add", x.Addr.String() + "/30", "dev", "host0"},
		{"-n", x.Name, "link", "set", "host0", "up"},
		{"-n", x.Name, "route", "add", "default", "via", x.Gateway.String()},
		{"-n", p, "addr", "add", x.Gateway.String() + "/30", "dev", x.Name},
		{"-n", p, "link", "set", x.Name, "up"},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	roots, err := cgroupRoots()
	if err != nil {
		return err
	}
	for _, r := range roots {
		cg := filepath.Join(r, x.Name)
		if err := os.Mkdir(cg, 0o755); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		x.cgroups = append(x.cgroups, cg)
	}
	return nil
}

// boot starts systemd-nspawn --boot on the overlay, in the box's network
// namespace and its own cgroups (parallel machines must not share
// nspawn's payload cgroup). The host has no systemd to register with:
// --register=no --keep-unit.
func (x *Box) boot() error {
	console, err := os.OpenFile(filepath.Join(x.dir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer console.Close()
	var script strings.Builder
	for _, cg := range x.cgroups {
		fmt.Fprintf(&script, "echo $$ > '%s/cgroup.procs' || exit 1; ", cg)
	}
	script.WriteString(`exec systemd-nspawn "$@"`)
	cmd := exec.Command("sh", "-c", script.String(), "sh",
		"-q", "-D", filepath.Join(x.dir, "merged"), "--boot", "--register=no", "--keep-unit", "-M", x.Name,
		"--network-namespace-path="+netnsDir+x.Name, "--console=read-only")
	cmd.Stdout, cmd.Stderr = console, console
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start systemd-nspawn: %w", err)
	}
	x.cmd = cmd
	x.boots++
	x.bootedAt = time.Now()
	x.notify()
	return nil
}

// notify wakes the waiters of a change. Called with x.mu held.
func (x *Box) notify() {
	close(x.changed)
	x.changed = make(chan struct{})
}

// supervise waits for the machine to stop: a reboot boots it again, a
// power-off of its own shows the droplet off, and a destroy removes it.
func (x *Box) supervise() {
	for {
		x.mu.Lock()
		cmd := x.cmd
		x.mu.Unlock()
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		x.mu.Lock()
		switch {
		case x.destroying:
			x.mu.Unlock()
			x.teardown()
			x.finish()
			return
		case code == rebootExit:
			if err := x.boot(); err != nil {
				x.bed.t.Errorf("machines: reboot of %s: %v", x.Name, err)
				x.state = StateOff
				x.notify()
				x.mu.Unlock()
				x.bed.setStatus(x.Droplet.ID, "off")
				return
			}
			x.mu.Unlock()
		default:
			x.state = StateOff
			x.notify()
			x.mu.Unlock()
			x.bed.setStatus(x.Droplet.ID, "off")
			return
		}
	}
}

// destroy pulls the machine's power and removes the box, without
// waiting: every process of the machine, systemd-nspawn included, is
// killed at once (DigitalOcean's destroy is no orderly shutdown: nothing
// on the droplet gets to say goodbye).
func (x *Box) destroy() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.destroying || x.state == StateRemoved {
		return
	}
	x.destroying = true
	if x.state == StateRunning && x.cmd != nil {
		go func() {
			killCgroups(x.cgroups) // supervise sees nspawn end and removes the box
			_ = x.cmd.Process.Kill()
		}()
		return
	}
	go func() { x.teardown(); x.finish() }()
}

// teardown removes what prepare made: the overlay mount, the namespace
// (its veth goes with it), nspawn's propagation directory, the cgroups
// and the box's directory. Errors fail the test.
func (x *Box) teardown() {
	var errs []error
	if err := unmount(filepath.Join(x.dir, "merged")); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(netnsDir + x.Name); err == nil {
		if err := ip("netns", "del", x.Name); err != nil {
			errs = append(errs, err)
		}
	}
	_ = os.RemoveAll(filepath.Join("/run/systemd/nspawn/propagate", x.Name))
	for _, cg := range x.cgroups {
		if err := removeCgroup(cg); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(x.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		x.bed.t.Errorf("machines: remove box %s: %v", x.Name, err)
	}
}

// finish marks the box removed.
func (x *Box) finish() {
	x.mu.Lock()
	x.state = StateRemoved
	x.notify()
	close(x.removed)
	x.mu.Unlock()
	x.bed.mu.Lock()
	delete(x.bed.byAddr, x.Addr)
	x.bed.mu.Unlock()
}

// cgroupRoots returns this process's own cgroup directory in each
// hierarchy systemd-nspawn uses: the named systemd hierarchy (cgroup v1)
// and the unified one (cgroup v2, at /sys/fs/cgroup/unified on a hybrid
// host, /sys/fs/cgroup on a unified one). Each box's cgroups are made
// below them.
func cgroupRoots() ([]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var roots []string
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		var dir string
		switch {
		case f[1] == "name=systemd":
			dir = filepath.Join("/sys/fs/cgroup/systemd", f[2])
		case f[0] == "0" && f[1] == "":
			if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
				dir = filepath.Join("/sys/fs/cgroup/unified", f[2])
			} else if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				dir = filepath.Join("/sys/fs/cgroup", f[2])
			}
		}
		if dir != "" {
			if _, err := os.Stat(dir); err == nil {
				roots = append(roots, dir)
			}
		}
	}
	return roots, nil
}

// removeCgroup kills every process left in a cgroup and the cgroups below
// it (a machine whose systemd-nspawn was killed keeps running: its PID 1
// is in there) and waits for them to be gone, then removes the cgroups,
// deepest first (a cgroup directory goes with rmdir once it has no
// processes and no children).
func removeCgroup(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	killCgroups(dirs)
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// killCgroups kills every process in the cgroups dirs and below them, and
// waits for them to be gone.
func killCgroups(dirs []string) {
	var pids []int
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	for _, pid := range pids {
		waitGone(pid)
	}
}

// upperDirs makes each directory of rel under the upper layer upper, each
// 0755 as Debian's are, set with Chmod: a directory of the upper layer
// gives the box its mode (overlayfs), and the process umask may be anything
// — an in-process daemon of another test sets 077 (daemon.App.open), and a
// box whose / and /usr were 0700 locked out every user but root: dbus could
// not read its configuration ("Permission denied"), logind and
// multi-user.target never came, and cloud-final, the agent's install, never
// ran.
func upperDirs(upper, rel string) error {
	p := upper
	for _, part := range strings.Split(filepath.ToSlash(rel), "/") {
		p = filepath.Join(p, part)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := os.Chmod(p, 0o755); err != nil {
			return err
		}
	}
	return nil
}
