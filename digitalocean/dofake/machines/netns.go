package machines

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns add NAME` binds a named network namespace.
const netnsDir = "/run/netns/"

// hostNetns is the network namespace this process started in, which
// every thread but inNetns's (while fn runs) is in.
var hostNetns = sync.OnceValues(func() (int, error) {
	return unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
})

// inNetns runs fn on an OS thread that has entered the named network
// namespace, and returns fn's error. Sockets fn opens (net.Listen,
// net.Dialer.DialContext) belong to that namespace for their whole life,
// whichever thread later reads them. The thread then goes back to the
// host's namespace before the runtime may reuse it; if it cannot, it stays
// locked and ends with the goroutine. Threads are not left to end as a
// habit: a child started with Pdeathsig (proctest's daemons) dies with the
// thread that forked it, and Go reuses threads for any goroutine.
func inNetns(name string, fn func() error) error {
	host, err := hostNetns()
	if err != nil {
		return fmt.Errorf("the host's network namespace: %w", err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(netnsDir+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open network namespace %s: %w", name, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", name, err)
			return
		}
		err = fn()
		if unix.Setns(host, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: still locked, the thread ends with this goroutine
		errc <- err
	}()
	return <-errc
}

// listenIn opens a TCP listener on addr inside the named namespace.
func listenIn(ns, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(ns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// dialIn dials addr over TCP from inside the named namespace.
func dialIn(ctx context.Context, ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(ns, func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// ip runs `ip ARGS…` and returns its error with its output.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// pipe copies both ways between a and b until either side ends, then
// closes both.
func pipe(a, b net.Conn) {
	var once sync.Once
	done := func() { once.Do(func() { a.Close(); b.Close() }) }
	go func() { _, _ = io.Copy(a, b); done() }()
	_, _ = io.Copy(b, a)
	done()
}
