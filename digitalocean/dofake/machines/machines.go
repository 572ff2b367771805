// Package machines is dofake's machine backend: a test bed in which every
// droplet created on a dofake.Server is a booted Debian machine — systemd as
// PID 1, OpenSSH's sshd, cloud-init running the droplet's user data — so a
// test asserts from what a droplet does, not from a sandbox directory
// (docs/architecture.md, "Tests").
//
// NewServer starts a dofake.Server whose WithOnCreate hook boots one box
// per created droplet with systemd-nspawn --boot, and whose WithOnDelete
// hook powers it off and removes it:
//
//   - the root filesystem is the tree contrib/install-test-tools.sh builds
//     with debootstrap (<repo>/.tools/rootfs), never written: each box is an
//     overlayfs over it, with its own upper layer holding the NoCloud seed
//     (the request's user_data as user data; its SSH keys, matched by
//     fingerprint against Config.AccountKeys, as meta-data public-keys,
//     which cloud-init installs as root's authorized keys, the way
//     DigitalOcean's images do), the bed's cloud-init settings and the test
//     CA in the system bundle;
//   - the box's address is its own /30 out of 10.250.0.0/16, and the
//     droplet's public IPv4 is that address;
//   - the droplet's status follows the machine: active while it runs, off
//     when it stops by itself (poweroff, a crash); a reboot inside the box
//     (systemd-nspawn exits 133) boots it again on the same overlay;
//   - from inside a box, http://169.254.169.254/metadata/v1/ answers the
//     droplet's id, region, hostname, public keys and user data, as
//     DigitalOcean's metadata service does (the agent reads id and region;
//     docs/operations.md, "Agent"), and https://10.250.255.1/ (ControlURL)
//     is a TLS front, with a certificate of the test CA, forwarding each
//     connection's plain bytes to Config.Upstream on the host's loopback:
//     the daemon under test, which the agent refuses to reach over plain
//     http off loopback.
//
// Everything networked lives in one private network namespace made for
// the run: each box's veth has its host side there, the TLS front and the
// metadata service listen there (from OS threads that entered it), and a
// test reaches a box only through Bed.Dial, which dials from inside it.
// The host's own namespaces, interfaces and routes are never touched, and
// no address outside that namespace is ever a target. The addresses the
// bed hands out (Box.Addr, ControlURL, ServeTLS's URL) exist only inside
// it: a process that dials them — the daemon under test, whose key
// delivery dials the droplets' public addresses, or a CLI fetching
// through a grant on ServeTLS's URL — runs inside it too (Bed.Wrap, an
// nsenter --net wrapper); Bed.Expose brings a host service (dofake, an
// S3 store) in at the same loopback address and Bed.Publish takes one
// from inside out, so URLs read the same on both sides. Names (namespaces,
// veths, machines, cgroups, the run directory) carry a per-run prefix
// "chtb<4 hex>"; New first reaps what a killed run of any prefix left
// (its nspawn processes, overlay mounts, namespaces, cgroups), never a
// live run's.
//
// Waits are on evidence — `cloud-init status --wait` inside the box,
// sshd's handshake, the nspawn process's exit — never on sleeps.
//
// Where root, CAP_SYS_ADMIN or another capability it needs (Missing),
// systemd-nspawn, ip, nsenter, a writable cgroup hierarchy or the root
// filesystem are missing, New skips the test naming what is missing,
// except under CI=true, where it fails; under contrib/test.sh --fast it
// skips (proctest.FullRunOnly).
package machines

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// Addresses inside the private namespace. None of them is ever routed
// outside it.
var (
	// ControlAddr is the TLS front's address, on the private namespace's
	// loopback; every box reaches it through its gateway.
	ControlAddr = netip.MustParseAddr("10.250.255.1")
	// MetadataAddr is DigitalOcean's metadata service address.
	MetadataAddr = netip.MustParseAddr("169.254.169.254")
	// boxBase is where box n's /30 starts: 10.250.0.0 + 4n.
	boxBase = netip.MustParseAddr("10.250.0.0")
)

// maxBoxes keeps every box's /30 below 10.250.255.0 (ControlAddr's /24).
const maxBoxes = 255 * 64

// prefixStem starts every run prefix; the 4 hex digits after it make the
// run's own (names stay within the 15 bytes of an interface name).
const prefixStem = "chtb"

// runRoot holds one directory per run (its prefix): the pid file that
// says the run is alive, and each box's overlay layers and console log.
const runRoot = "/tmp/chalupa-machines"

// RootFSLink is where contrib/install-test-tools.sh links the root
// filesystem, relative to the repository root.
const RootFSLink = ".tools/rootfs"

// Config configures a Bed.
type Config struct {
	// Upstream is the host:port on the host's loopback the TLS front
	// forwards to (the daemon's listen address). Empty: the front refuses
	// connections after the TLS handshake.
	Upstream string
	// AccountKeys are the account's SSH public keys in authorized_keys
	// form. A droplet created with ssh_keys names them by fingerprint
	// (MD5, DigitalOcean's form, or SHA256); those keys become the box's
	// NoCloud public-keys. A name matching none fails the test.
	AccountKeys []string
	// RootFS is the root filesystem tree; empty means <repo>/.tools/rootfs.
	RootFS string
}

// Bed is a running test bed: the private namespace, the TLS front, the
// metadata service and the boxes. Create it with NewServer or New.
type Bed struct {
	t      testing.TB
	cfg    Config
	prefix string
	dir    string // runRoot/prefix
	rootfs string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	keys   map[string]string // fingerprint → authorized key line

	front, meta net.Listener
	wg          sync.WaitGroup

	mu     sync.Mutex
	srv    *dofake.Server
	next   int
	boxes  map[int]*Box // by droplet id
	byAddr map[netip.Addr]*Box
}

// NewServer starts a dofake.Server (with opts) whose droplets are boxes of
// a new Bed, and returns both. See New for the skip rules.
func NewServer(t testing.TB, cfg Config, opts ...dofake.Option) (*dofake.Server, *Bed) {
	t.Helper()
	b := New(t, cfg)
	all := append(append([]dofake.Option(nil), opts...), dofake.WithOnCreate(b.create), dofake.WithOnDelete(b.remove))
	s := dofake.New(t, all...)
	b.mu.Lock()
	b.srv = s
	b.mu.Unlock()
	return s, b
}

// New checks what the bed needs (skipping or failing the test as the
// package comment says), reaps what killed runs left, and makes the run's
// private namespace with the TLS front and the metadata service in it.
// Everything is torn down when the test ends: boxes powered off and
// removed, mounts, namespaces and cgroups gone.
func New(t testing.TB, cfg Config) *Bed {
	t.Helper()
	proctest.FullRunOnly(t, "boots machines with systemd-nspawn")
	rootfs := cfg.RootFS
	if rootfs == "" {
		rootfs = filepath.Join(proctest.RepoRoot(t), RootFSLink)
	}
	if missing := Missing(rootfs); len(missing) > 0 {
		msg := fmt.Sprintf("machines: missing %s (%s)", strings.Join(missing, ", "), missingHint(missing))
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: a missing requirement fails the run)", msg)
		}
		t.Skip(msg)
	}
	rootfs, err := filepath.EvalSymlinks(rootfs)
	if err != nil {
		t.Fatalf("machines: root filesystem: %v", err)
	}
	reapKilledRuns(t)
	if err := raiseInotifyInstances(); err != nil {
		t.Fatalf("machines: %v", err)
	}

	b := &Bed{t: t, cfg: cfg, rootfs: rootfs, keys: map[string]string{}, boxes: map[int]*Box{}, byAddr: map[netip.Addr]*Box{}}
	for _, line := range cfg.AccountKeys {
		pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			t.Fatalf("machines: account key %q: %v", line, err)
		}
		b.keys[ssh.FingerprintLegacyMD5(pk)] = strings.TrimSpace(line)
		b.keys[ssh.FingerprintSHA256(pk)] = strings.TrimSpace(line)
	}
	if err := b.claimPrefix(); err != nil {
		t.Fatalf("machines: %v", err)
	}
	t.Cleanup(b.close)
	if err := b.makeCA(); err != nil {
		t.Fatalf("machines: test CA: %v", err)
	}
	if err := b.makeNetwork(); err != nil {
		t.Fatalf("machines: private namespace: %v", err)
	}
	return b
}

// neededCaps are the capabilities booting boxes needs besides root's uid,
// each named as Missing names it. CAP_SYS_ADMIN (mounts, namespaces) and
// CAP_NET_ADMIN (the veths, addresses and routes `ip` makes) are the bed's
// own; the rest are systemd-nspawn's, each found by running it with that
// one capability dropped from the bounding set: CAP_DAC_OVERRIDE (the
// overlay over a tree in root's home), CAP_SETGID ("Failed to become
// root"), CAP_SETPCAP ("Dropping capabilities failed") and CAP_SYS_CHROOT
// ("Failed to move root directory"). A root without one of them — a
// container given --cap-add SYS_ADMIN alone — got as far as `ip` or nspawn
// and failed there with "Operation not permitted", skip or not.
var neededCaps = []struct {
	bit  uint
	name string
}{
	{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"},
	{unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"},
	{unix.CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"},
	{unix.CAP_SETGID, "CAP_SETGID"},
	{unix.CAP_SETPCAP, "CAP_SETPCAP"},
	{unix.CAP_SYS_CHROOT, "CAP_SYS_CHROOT"},
}

// Missing lists what booting boxes needs and this process lacks: root,
// the capabilities of neededCaps (CAP_SYS_ADMIN, CAP_NET_ADMIN, …), the
// commands systemd-nspawn, ip and nsenter, a writable cgroup hierarchy,
// and the root filesystem at rootfs with every file of rootfsFiles. Empty
// means all are there.
func Missing(rootfs string) []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	eff := effectiveCaps()
	for _, c := range neededCaps {
		if eff&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	for _, c := range []string{"systemd-nspawn", "ip", "nsenter"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if roots, err := cgroupRoots(); err != nil || len(roots) == 0 || unix.Access(roots[0], unix.W_OK) != nil {
		missing = append(missing, "a writable cgroup hierarchy")
	}
	for _, f := range rootfsFiles {
		if _, err := os.Stat(filepath.Join(rootfs, f)); err != nil {
			if f == rootfsFiles[0] {
				missing = append(missing, "the root filesystem "+rootfs)
			} else {
				missing = append(missing, fmt.Sprintf("the root filesystem %s whole (it lacks %s)", rootfs, f))
			}
			break
		}
	}
	return missing
}

// rootfsFiles is what the bed uses from the root filesystem, the first
// saying it is a Debian tree at all: contrib/install-test-tools.sh's
// ROOTFS_FILES, which builds a cached tree lacking one again (a test holds
// the two lists equal). A damaged tree booted boxes without sshd or
// cloud-init, and the test failed minutes later waiting for them.
var rootfsFiles = []string{"etc/debian_version", "usr/lib/systemd/systemd", "usr/sbin/sshd", "usr/bin/cloud-init",
	"usr/bin/curl", "usr/bin/ip", "usr/bin/journalctl", "etc/ssl/certs/ca-certificates.crt"}

// effectiveCaps reads CapEff from /proc/self/status (0 when unreadable).
func effectiveCaps() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0
			}
			return caps
		}
	}
	return 0
}

// missingHint says what gives the bed what Missing found lacking: root
// with every capability for the privileges (contrib/install-test-tools.sh
// gives none of them), the script run as root for the commands and the
// root filesystem.
func missingHint(missing []string) string {
	var privileges, tools bool
	for _, m := range missing {
		switch {
		case m == "root" || strings.HasPrefix(m, "CAP_") || m == "a writable cgroup hierarchy":
			privileges = true
		default:
			tools = true
		}
	}
	var hints []string
	if privileges {
		hints = append(hints, "run the machine tests as root with every capability; in a container, a privileged one")
	}
	if tools {
		hints = append(hints, "contrib/install-test-tools.sh, run as root, installs systemd-container and debootstrap and builds the root filesystem")
	}
	return strings.Join(hints, "; ")
}

// Prefix is the run's name prefix ("chtb" and 4 hex digits).
func (b *Bed) Prefix() string { return b.prefix }

// ControlURL is the TLS front's URL as boxes reach it ("https://10.250.255.1").
func (b *Bed) ControlURL() string { return "https://" + ControlAddr.String() }

// CAPEM is the test CA's certificate (PEM) that every box trusts.
func (b *Bed) CAPEM() []byte { return bytes.Clone(b.caPEM) }

// Box returns the box of droplet id, or nil when the bed booted none.
func (b *Bed) Box(id int) *Box {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.boxes[id]
}

// Dial dials addr over TCP from inside the private namespace: the way a
// test reaches a box (its sshd at Box.Addr:22). Errors: the dial's.
func (b *Bed) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return dialIn(ctx, b.prefix, addr)
}

// claimPrefix picks an unused prefix and writes the run's pid file, which
// marks it live for every other run's reaper.
func (b *Bed) claimPrefix() error {
	if err := os.MkdirAll(runRoot, 0o700); err != nil {
		return err
	}
	for range 16 {
		var r [2]byte
		if _, err := rand.Read(r[:]); err != nil {
			return err
		}
		p := prefixStem + hex.EncodeToString(r[:])
		dir := filepath.Join(runRoot, p)
		if err := os.Mkdir(dir, 0o700); err != nil {
			continue // taken
		}
		if _, err := os.Stat(netnsDir + p); err == nil {
			_ = os.Remove(dir)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(procIdentity(os.Getpid())), 0o600); err != nil {
			return err
		}
		b.prefix, b.dir = p, dir
		return nil
	}
	return errors.New("no free run prefix")
}

// procIdentity is "PID STARTTIME" of a live process ("" for none or a
// zombie): a pid alone may be reused.
func procIdentity(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" { // a zombie's run is over
		return ""
	}
	return fmt.Sprintf("%d %s", pid, f[19]) // field 22: starttime
}

// makeNetwork makes the private namespace with its loopback holding the
// control and metadata addresses, and starts the TLS front and the
// metadata service listening in it.
func (b *Bed) makeNetwork() error {
	if err := ip("netns", "add", b.prefix); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"-n", b.prefix, "link", "set", "lo", "up"},
		{"-n", b.prefix, "addr", "add", ControlAddr.String() + "/32", "dev", "lo"},
		{"-n", b.prefix, "addr", "add", MetadataAddr.String() + "/32", "dev", "lo"},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	var err error
	if b.front, err = listenIn(b.prefix, net.JoinHostPort(ControlAddr.String(), "443")); err != nil {
		return err
	}
	if b.meta, err = listenIn(b.prefix, net.JoinHostPort(MetadataAddr.String(), "80")); err != nil {
		return err
	}
	b.wg.Add(2)
	go func() { defer b.wg.Done(); b.serveFront() }()
	go func() {
		defer b.wg.Done()
		srv := &http.Server{Handler: http.HandlerFunc(b.serveMetadata), ReadHeaderTimeout: 10 * time.Second}
		_ = srv.Serve(b.meta)
	}()
	return nil
}

// serveFront terminates TLS with the test CA's certificate for
// ControlAddr and pipes each connection's plain bytes to Config.Upstream,
// dialled from the host's namespace (this goroutine's threads never
// entered another).
func (b *Bed) serveFront() {
	cert, err := b.leaf()
	if err != nil {
		b.t.Errorf("machines: front certificate: %v", err)
		return
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	for {
		c, err := b.front.Accept()
		if err != nil {
			return
		}
		go func() {
			tc := tls.Server(c, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b.mu.Lock()
			upstream := b.cfg.Upstream
			b.mu.Unlock()
			if err := tc.HandshakeContext(ctx); err != nil || upstream == "" {
				tc.Close()
				return
			}
			up, err := (&net.Dialer{}).DialContext(ctx, "tcp", upstream)
			if err != nil {
				tc.Close()
				return
			}
			pipe(tc, up)
		}()
	}
}

// serveMetadata answers DigitalOcean's metadata paths for the box whose
// address the request came from.
func (b *Bed) serveMetadata(w http.ResponseWriter, r *http.Request) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	a, _ := netip.ParseAddr(host)
	b.mu.Lock()
	x := b.byAddr[a]
	b.mu.Unlock()
	if x == nil {
		http.NotFound(w, r)
		return
	}
	item, ok := strings.CutPrefix(r.URL.Path, "/metadata/v1/")
	var v string
	switch {
	case !ok:
		http.NotFound(w, r)
		return
	case item == "id":
		v = strconv.Itoa(x.Droplet.ID)
	case item == "region":
		v = x.Droplet.Region
	case item == "hostname":
		v = x.Droplet.Name
	case item == "public-keys":
		v = strings.Join(x.keys, "\n")
	case item == "user-data":
		v = x.Droplet.UserData
	default:
		http.NotFound(w, r)
		return
	}
	x.mu.Lock()
	x.metaReads = append(x.metaReads, item)
	x.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(v))
}

// makeCA makes the run's test CA.
func (b *Bed) makeCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chalupa test bed CA " + b.prefix},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return err
	}
	b.ca, _ = x509.ParseCertificate(der)
	b.ca.PublicKey = key.Public()
	b.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	b.caKey = key
	return nil
}

// leaf issues the front's certificate for ControlAddr.
func (b *Bed) leaf() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ControlAddr.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{ControlAddr.AsSlice()}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, b.ca, key.Public(), b.caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// create is the WithOnCreate hook: it prepares and boots the droplet's
// box; the droplet shows "new" until systemd-nspawn runs, then "active".
func (b *Bed) create(d dofake.Droplet) {
	b.mu.Lock()
	n := b.next
	b.next++
	srv := b.srv
	b.mu.Unlock()
	if n >= maxBoxes {
		b.t.Errorf("machines: more than %d boxes", maxBoxes)
		return
	}
	var keys []string
	for _, k := range d.SSHKeys {
		b.mu.Lock()
		line, ok := b.keys[k]
		b.mu.Unlock()
		if !ok {
			b.t.Errorf("machines: droplet %d names SSH key %q, which is none of Config.AccountKeys", d.ID, k)
			continue
		}
		keys = append(keys, line)
	}
	x := newBox(b, n, d, keys)
	b.mu.Lock()
	b.boxes[d.ID] = x
	b.byAddr[x.Addr] = x
	b.mu.Unlock()
	srv.SetPublicIPv4(d.ID, x.Addr.String())
	srv.SetStatus(d.ID, "new")
	if err := x.prepare(); err != nil {
		b.t.Errorf("machines: droplet %d: %v", d.ID, err)
		srv.SetStatus(d.ID, "off")
		x.finish()
		return
	}
	x.mu.Lock()
	err := x.boot()
	x.mu.Unlock()
	if err != nil {
		b.t.Errorf("machines: droplet %d: %v", d.ID, err)
		srv.SetStatus(d.ID, "off")
		x.teardown()
		x.finish()
		return
	}
	srv.SetStatus(d.ID, "active")
	go x.supervise()
}

// remove is the WithOnDelete hook: it starts powering the box off and
// removing it, and returns (Box.WaitRemoved waits for the end).
func (b *Bed) remove(d dofake.Droplet) {
	if x := b.Box(d.ID); x != nil {
		x.destroy()
	}
}

// setStatus sets the droplet's status on the server, if it still exists.
func (b *Bed) setStatus(id int, status string) {
	b.mu.Lock()
	srv := b.srv
	b.mu.Unlock()
	if srv != nil {
		srv.SetStatus(id, status)
	}
}

// close powers every box off, removes it, stops the listeners and removes
// the private namespace and the run directory.
func (b *Bed) close() {
	b.mu.Lock()
	var all []*Box
	for _, x := range b.boxes {
		all = append(all, x)
	}
	b.mu.Unlock()
	for _, x := range all {
		x.destroy()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, x := range all {
		if err := x.WaitRemoved(ctx); err != nil {
			b.t.Errorf("machines: box %s not removed: %v", x.Name, err)
		}
	}
	if b.front != nil {
		b.front.Close()
	}
	if b.meta != nil {
		b.meta.Close()
	}
	b.wg.Wait()
	if b.prefix != "" {
		if _, err := os.Stat(netnsDir + b.prefix); err == nil {
			if err := ip("netns", "del", b.prefix); err != nil {
				b.t.Errorf("machines: %v", err)
			}
		}
		if err := os.RemoveAll(b.dir); err != nil {
			b.t.Errorf("machines: remove %s: %v", b.dir, err)
		}
	}
}

// reapKilledRuns removes what runs that are no longer alive left behind:
// their nspawn processes (killed), overlay mounts, namespaces, nspawn's
// propagation directories, cgroups and run directories. A run is alive
// while the process its pid file names (pid and start time) is.
func reapKilledRuns(t testing.TB) {
	t.Helper()
	dead := map[string]bool{}
	if ents, err := os.ReadDir(runRoot); err == nil {
		for _, e := range ents {
			if !isPrefix(e.Name()) {
				continue
			}
			id, err := os.ReadFile(filepath.Join(runRoot, e.Name(), "pid"))
			alive := false
			if err == nil {
				f := strings.Fields(string(id))
				if len(f) == 2 {
					pid, _ := strconv.Atoi(f[0])
					alive = pid > 0 && procIdentity(pid) == strings.TrimSpace(string(id))
				}
			}
			if err == nil && !alive {
				dead[e.Name()] = true
			}
		}
	}
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			p, _, _ := strings.Cut(e.Name(), "-")
			if !isPrefix(p) {
				continue
			}
			if _, err := os.Stat(filepath.Join(runRoot, p)); errors.Is(err, os.ErrNotExist) {
				dead[p] = true // its run directory, made first, is gone
			}
		}
	}
	if roots, err := cgroupRoots(); err == nil {
		for _, r := range roots {
			ents, _ := os.ReadDir(r)
			for _, e := range ents {
				p, _, _ := strings.Cut(e.Name(), "-")
				if !e.IsDir() || !isPrefix(p) {
					continue
				}
				if _, err := os.Stat(filepath.Join(runRoot, p)); errors.Is(err, os.ErrNotExist) {
					dead[p] = true
				}
			}
		}
	}
	var prefixes []string
	for p := range dead {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	for _, p := range prefixes {
		t.Logf("machines: reaping the leftovers of killed run %s", p)
		if err := reap(p); err != nil {
			t.Errorf("machines: reap %s: %v", p, err)
		}
	}
}

// isPrefix reports whether s is a run prefix: "chtb" and 4 hex digits.
func isPrefix(s string) bool {
	h, ok := strings.CutPrefix(s, prefixStem)
	if !ok || len(h) != 4 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// reap removes one dead run's leftovers.
func reap(p string) error {
	var errs []error
	for _, pid := range nspawnPIDs(p + "-") {
		_ = unix.Kill(pid, unix.SIGKILL)
		waitGone(pid)
	}
	dir := filepath.Join(runRoot, p)
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			merged := filepath.Join(dir, e.Name(), "merged")
			if err := unmount(merged); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			if e.Name() == p || strings.HasPrefix(e.Name(), p+"-") {
				if err := ip("netns", "del", e.Name()); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if ents, err := os.ReadDir("/run/systemd/nspawn/propagate"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), p+"-") {
				_ = os.RemoveAll(filepath.Join("/run/systemd/nspawn/propagate", e.Name()))
			}
		}
	}
	if roots, err := cgroupRoots(); err == nil {
		for _, r := range roots {
			ents, _ := os.ReadDir(r)
			for _, e := range ents {
				if e.IsDir() && strings.HasPrefix(e.Name(), p+"-") {
					if err := removeCgroup(filepath.Join(r, e.Name())); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// nspawnPIDs lists the systemd-nspawn processes whose machine name (-M)
// starts with namePrefix.
func nspawnPIDs(namePrefix string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "systemd-nspawn" {
			continue
		}
		for i, a := range args {
			if a == "-M" && i+1 < len(args) && strings.HasPrefix(args[i+1], namePrefix) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// waitGone waits, up to a minute, for pid to be dead (gone, or a zombie
// its parent has yet to reap), polling its /proc entry (a process that is
// not our child cannot be waited for).
func waitGone(pid int) {
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
			if f := strings.Fields(string(b[i+1:])); len(f) > 0 && f[0] == "Z" {
				return
			}
		}
		<-tick.C
	}
}

// unmount unmounts an overlay mount point if it is one.
func unmount(dir string) error {
	if !isMountPoint(dir) {
		return nil
	}
	if err := unix.Unmount(dir, 0); err != nil {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return nil
}

// isMountPoint reports whether dir is in /proc/self/mountinfo.
func isMountPoint(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 4 && fs[4] == dir {
			return true
		}
	}
	return false
}

// SetUpstream sets where the TLS front forwards from now on
// (Config.Upstream): e.g. Publish's address, once the daemon's is known.
func (b *Bed) SetUpstream(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cfg.Upstream = addr
}

// AddAccountKey adds an account SSH key (authorized_keys form) that
// droplets created from now on may name by fingerprint, as
// Config.AccountKeys: e.g. the daemon's own SSH identity, known only once
// it runs. Errors: the line is no public key.
func (b *Bed) AddAccountKey(line string) error {
	pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return fmt.Errorf("account key: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keys[ssh.FingerprintLegacyMD5(pk)] = strings.TrimSpace(line)
	b.keys[ssh.FingerprintSHA256(pk)] = strings.TrimSpace(line)
	return nil
}

// ServeTLS serves h over TLS on ControlAddr:port inside the private
// namespace, with a certificate of the test CA (which every box trusts),
// until the test ends; it returns the URL boxes use
// ("https://10.250.255.1:PORT"), e.g. a release directory for cloud-init
// to download from. Port 443 is the front's. The URL exists only inside
// the bed: a client on the host must run through Wrap (the address is no
// host's, and the host's routes would send it elsewhere). Errors fail the
// test.
func (b *Bed) ServeTLS(port int, h http.Handler) string {
	b.t.Helper()
	addr := net.JoinHostPort(ControlAddr.String(), strconv.Itoa(port))
	ln, err := listenIn(b.prefix, addr)
	if err != nil {
		b.t.Fatalf("machines: listen on %s: %v", addr, err)
	}
	cert, err := b.leaf()
	if err != nil {
		b.t.Fatalf("machines: certificate: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	b.wg.Add(1)
	go func() { defer b.wg.Done(); _ = srv.ServeTLS(ln, "", "") }()
	b.t.Cleanup(func() { srv.Close() })
	return "https://" + addr
}

// Expose makes the host's TCP service at addr (a loopback host:port, e.g.
// dofake's or an S3 store's) reachable at the same address inside the
// private namespace, for processes the test runs there (Wrap): each
// connection accepted there is piped to addr dialled from the host.
// Errors fail the test.
func (b *Bed) Expose(addr string) {
	b.t.Helper()
	ln, err := listenIn(b.prefix, addr)
	if err != nil {
		b.t.Fatalf("machines: expose %s: %v", addr, err)
	}
	b.forward(ln, func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	})
}

// Publish reserves a free loopback address on the host and makes it
// reach the same address inside the private namespace, where a process
// the test runs there (Wrap) listens: the test and the TLS front reach a
// daemon inside the bed at the returned host:port. Connections made
// before anything listens inside are closed at once. Errors fail the test.
func (b *Bed) Publish() string {
	b.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.t.Fatalf("machines: publish: %v", err)
	}
	addr := ln.Addr().String()
	b.forward(ln, func(ctx context.Context) (net.Conn, error) { return dialIn(ctx, b.prefix, addr) })
	return addr
}

// forward accepts on ln until the test ends and pipes each connection to
// what dial returns.
func (b *Bed) forward(ln net.Listener, dial func(context.Context) (net.Conn, error)) {
	b.t.Cleanup(func() { ln.Close() })
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				up, err := dial(ctx)
				if err != nil {
					c.Close()
					return
				}
				pipe(c, up)
			}()
		}
	}()
}

// Wrap returns the path of an executable that runs bin, with its
// arguments, inside the private namespace (nsenter --net): the daemon
// under test, so that the droplets' public addresses it dials (SSH key
// delivery) are the boxes', reached in the bed and nowhere else. Its
// children (pulumi, the provider) run there too. Errors fail the test.
func (b *Bed) Wrap(bin string) string {
	b.t.Helper()
	p := filepath.Join(b.dir, "wrap-"+filepath.Base(bin))
	script := fmt.Sprintf("#!/bin/sh\nexec nsenter --net=%s -- %s \"$@\"\n", netnsDir+b.prefix, strconv.Quote(bin))
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		b.t.Fatalf("machines: wrap %s: %v", bin, err)
	}
	return p
}

// inotifyInstances is the floor New raises fs.inotify.max_user_instances
// to. Every booted box's systemd, journald, logind, dbus and cloud-init
// hold inotify instances — about 8 a box, all counted against root, the
// one user the bed runs as (measured: 40–64 with 5–8 boxes up) — and the
// full run's machine lane boots up to a dozen at once, about 100 of the
// kernel's default 128, with a machines package run beside it adding more.
// A box out of instances loses dbus, logind and multi-user.target, and
// cloud-final (the agent's install) never runs. 8192 leaves room.
const inotifyInstances = 8192

// inotifySysctl is fs.inotify.max_user_instances.
const inotifySysctl = "/proc/sys/fs/inotify/max_user_instances"

// raiseInotifyInstances raises fs.inotify.max_user_instances to
// inotifyInstances when it is lower (never lowers it). Errors: the sysctl
// cannot be read or written (the bed needs root already).
func raiseInotifyInstances() error {
	b, err := os.ReadFile(inotifySysctl)
	if err != nil {
		return fmt.Errorf("read %s: %w", inotifySysctl, err)
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("read %s: %w", inotifySysctl, err)
	}
	if cur >= inotifyInstances {
		return nil
	}
	if err := os.WriteFile(inotifySysctl, []byte(strconv.Itoa(inotifyInstances)), 0o644); err != nil {
		return fmt.Errorf("raise %s from %d to %d (booted boxes each hold several inotify instances, all root's): %w", inotifySysctl, cur, inotifyInstances, err)
	}
	return nil
}
