package machines_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/godo"
	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/digitalocean/dofake/machines"
)

// upstream stands in for the daemon behind the TLS front: it answers
// "hello <path>" and records the paths it was asked for.
type upstream struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.paths = append(u.paths, r.URL.Path)
		u.mu.Unlock()
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) asked() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.paths)
}

// accountKey makes an SSH key: its signer and its authorized_keys line.
func accountKey(t *testing.T) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func client(t *testing.T, s *dofake.Server) *godo.Client {
	t.Helper()
	c, err := godo.New(&http.Client{Transport: bearer{s.AddToken("test", dofake.FullAccess...)}}, godo.SetBaseURL(s.URL))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// userData writes a file from runcmd, reads the droplet's id from the
// metadata service and asks the TLS front for /from-box/<id>, trusting
// the test CA through the system bundle (curl without --cacert).
const userData = `#cloud-config
runcmd:
  - [sh, -c, 'echo made-by-runcmd > /root/runcmd-ran']
  - [sh, -c, 'curl -fsS --max-time 60 https://10.250.255.1/from-box/$(curl -fsS http://169.254.169.254/metadata/v1/id) > /root/front-answer']
`

// create creates a droplet with userData and the account key named by
// fingerprint, and returns its id.
func create(ctx context.Context, c *godo.Client, name, fingerprint string) (int, error) {
	d, _, err := c.Droplets.Create(ctx, &godo.DropletCreateRequest{
		Name: name, Region: "nyc3", Size: "s-1vcpu-1gb", Image: godo.DropletCreateImage{Slug: "debian-12-x64"},
		SSHKeys: []godo.DropletCreateSSHKey{{Fingerprint: fingerprint}}, UserData: userData,
	})
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", name, err)
	}
	return d.ID, nil
}

// dumpOnFailure logs the box's console when the test fails.
func dumpOnFailure(t *testing.T, x *machines.Box) {
	t.Cleanup(func() {
		if t.Failed() {
			con := x.Console()
			if len(con) > 6000 {
				con = con[len(con)-6000:]
			}
			t.Logf("console of %s (tail):\n%s", x.Name, con)
		}
	})
}

// TestDropletIsABootedMachine proves the bed on one droplet, from the
// box's own evidence: cloud-init ran the user data to "done" (runcmd's
// file; the metadata service answered the box's id; curl reached the TLS
// front through the system CA bundle); sshd answers root with the
// droplet's key; the droplet's public IPv4 is the box's and its status
// active; cut off from the control plane (Box.CutControlPlane) the front
// is out of its reach, across a reboot, until restored; a reboot boots it
// again with its disk kept; a power-off inside
// shows the droplet off; DELETE removes the machine.
func TestDropletIsABootedMachine(t *testing.T) {
	// The process umask of a test binary that also runs in-process daemons
	// is 077 (daemon.App.open): the box's modes must not follow it.
	umask := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(umask) })
	up := newUpstream(t)
	signer, line := accountKey(t)
	srv, bed := machines.NewServer(t, machines.Config{Upstream: up.Listener.Addr().String(), AccountKeys: []string{line}})
	c := client(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	id, err := create(ctx, c, "box-one", ssh.FingerprintLegacyMD5(signer.PublicKey()))
	if err != nil {
		t.Fatal(err)
	}
	x := bed.Box(id)
	if x == nil {
		t.Fatal("no box for the created droplet")
	}
	dumpOnFailure(t, x)
	// The upper layer's directories give the box its modes: under a 077
	// umask / and /usr were 0700, every user but root locked out, dbus
	// and logind failed and cloud-final never ran.
	if got, err := x.Exec(ctx, "stat", "-c", "%a", "/", "/usr", "/etc/cloud/cloud.cfg.d", "/etc/ssl/certs/ca-certificates.crt"); err != nil || !slices.Equal(strings.Fields(got), []string{"755", "755", "755", "644"}) {
		t.Fatalf("modes of /, /usr, cloud.cfg.d and the CA bundle in the box: %q, %v; want 755 755 755 644", got, err)
	}
	out, err := x.WaitCloudInit(ctx)
	if err != nil {
		t.Fatalf("cloud-init: %v\n%s", err, out)
	}
	t.Logf("boot to cloud-init done: %v", time.Since(x.BootedAt()).Round(10*time.Millisecond))

	if got, err := x.Exec(ctx, "cat", "/root/runcmd-ran"); err != nil || strings.TrimSpace(got) != "made-by-runcmd" {
		t.Errorf("runcmd's file: %q, %v", got, err)
	}
	want := fmt.Sprintf("hello /from-box/%d", id)
	if got, err := x.Exec(ctx, "cat", "/root/front-answer"); err != nil || got != want {
		t.Errorf("the front's answer in the box: %q, %v; want %q", got, err, want)
	}
	if got := up.asked(); !slices.Equal(got, []string{fmt.Sprintf("/from-box/%d", id)}) {
		t.Errorf("upstream asked for %v", got)
	}
	if got := x.MetadataReads(); !slices.Contains(got, "id") {
		t.Errorf("metadata reads %v; want id", got)
	}

	cl, err := x.SSH(ctx, "root", signer)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := cl.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	b, err := sess.CombinedOutput("id -u; hostname; cat /root/.ssh/authorized_keys")
	cl.Close()
	if err != nil {
		t.Fatalf("ssh session: %v: %s", err, b)
	}
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 3 || lines[0] != "0" || lines[1] != "box-one" || lines[2] != line {
		t.Errorf("over ssh: %q; want uid 0, hostname box-one, root's key %q", b, line)
	}

	d, _, err := c.Droplets.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if pub, _ := d.PublicIPv4(); d.Status != "active" || pub != x.Addr.String() {
		t.Errorf("droplet status %q, public IPv4 %q; want active, %s", d.Status, pub, x.Addr)
	}

	// The control plane cut off from the box: the front cannot be
	// reached from it, across the reboot below, until restored.
	front := func(path string) (string, error) {
		return x.Exec(ctx, "curl", "-fsS", "--max-time", "20", "https://10.250.255.1"+path)
	}
	if err := x.CutControlPlane(true); err != nil {
		t.Fatal(err)
	}
	if out, err := front("/while-cut"); err == nil {
		t.Errorf("the front answered a cut box: %q", out)
	}

	// A reboot inside: systemd-nspawn exits 133 and the bed boots it again
	// on the same disk.
	if _, err := x.Exec(ctx, "systemctl", "reboot"); err != nil {
		t.Fatal(err)
	}
	if err := x.WaitBoots(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if out, err := x.WaitCloudInit(ctx); err != nil {
		t.Fatalf("cloud-init after the reboot: %v\n%s", err, out)
	}
	if out, err := front("/cut-after-reboot"); err == nil {
		t.Errorf("the front answered a cut box after its reboot: %q", out)
	}
	if err := x.CutControlPlane(false); err != nil {
		t.Fatal(err)
	}
	if got, err := front("/restored"); err != nil || got != "hello /restored" {
		t.Errorf("the front after the cut was restored: %q, %v", got, err)
	}
	if got := up.asked(); !slices.Equal(got, []string{fmt.Sprintf("/from-box/%d", id), "/restored"}) {
		t.Errorf("upstream asked for %v; want nothing while the box was cut", got)
	}
	if cl, err := x.SSH(ctx, "root", signer); err != nil {
		t.Errorf("sshd after the reboot: %v", err)
	} else {
		cl.Close()
	}
	if got, err := x.Exec(ctx, "cat", "/root/runcmd-ran"); err != nil || strings.TrimSpace(got) != "made-by-runcmd" {
		t.Errorf("runcmd's file after the reboot: %q, %v", got, err)
	}
	if d, _, err := c.Droplets.Get(ctx, id); err != nil || d.Status != "active" {
		t.Errorf("after the reboot: %v %v; want active", d, err)
	}

	// A power-off inside: the machine is off and so is the droplet.
	if _, err := x.Exec(ctx, "systemctl", "poweroff"); err != nil {
		t.Fatal(err)
	}
	if err := x.WaitState(ctx, machines.StateOff); err != nil {
		t.Fatal(err)
	}
	if d, _, err := c.Droplets.Get(ctx, id); err != nil || d.Status != "off" {
		t.Errorf("after the power-off: %v %v; want off", d, err)
	}

	if _, err := c.Droplets.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := x.WaitRemoved(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + x.Name); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the box's namespace is still there: %v", err)
	}
}

// TestThreeDropletsInParallel boots three droplets at once, each to
// cloud-init done with its own address and metadata, then deletes them
// while they run: each machine is powered off and removed.
func TestThreeDropletsInParallel(t *testing.T) {
	up := newUpstream(t)
	signer, line := accountKey(t)
	srv, bed := machines.NewServer(t, machines.Config{Upstream: up.Listener.Addr().String(), AccountKeys: []string{line}})
	c := client(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	start := time.Now()
	ids := make([]int, 3)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			var err error
			if ids[i], err = create(ctx, c, fmt.Sprintf("par-%d", i), ssh.FingerprintSHA256(signer.PublicKey())); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	errs := make([]error, len(ids))
	for i, id := range ids {
		x := bed.Box(id)
		dumpOnFailure(t, x)
		wg.Go(func() {
			if out, err := x.WaitCloudInit(ctx); err != nil {
				errs[i] = fmt.Errorf("%v\n%s", err, out)
				return
			}
			got, err := x.Exec(ctx, "cat", "/root/front-answer")
			if want := fmt.Sprintf("hello /from-box/%d", id); err != nil || got != want {
				errs[i] = fmt.Errorf("front answer %q, %v; want %q", got, err, want)
			}
		})
	}
	wg.Wait()
	t.Logf("3 droplets created and at cloud-init done in %v", time.Since(start).Round(10*time.Millisecond))
	for i, err := range errs {
		if err != nil {
			t.Errorf("box %d: %v", i, err)
		}
	}
	addrs := map[string]bool{}
	for _, id := range ids {
		addrs[bed.Box(id).Addr.String()] = true
	}
	if len(addrs) != len(ids) {
		t.Errorf("addresses %v: not one per box", addrs)
	}
	for _, id := range ids {
		if _, err := c.Droplets.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		x := bed.Box(id)
		if err := x.WaitRemoved(ctx); err != nil {
			t.Error(err)
		}
		if _, _, err := c.Droplets.Get(ctx, id); err == nil {
			t.Errorf("droplet %d still there after DELETE", id)
		}
	}

}
