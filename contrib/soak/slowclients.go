package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
)

// outcome is what happened to one connection attempt.
type outcome int

const (
	accepted       outcome = iota // keepalive: answered 200; silent: connected
	otherStatus                   // answered, but not 200 (e.g. 503 from a cap)
	refused                       // connect: ECONNREFUSED
	dialTimeout                   // connect: no answer in time (backlog full, SYNs dropped)
	dialOther                     // connect: any other error
	closedEarly                   // connected, then closed or reset by the server before answering
	requestTimeout                // connected, no answer in time
	nOutcomes
)

var outcomeNames = [nOutcomes]string{
	accepted:       "accepted",
	otherStatus:    "answered non-200",
	refused:        "refused at connect",
	dialTimeout:    "connect timed out",
	dialOther:      "connect failed otherwise",
	closedEarly:    "closed by the server without an answer",
	requestTimeout: "no answer in time",
}

// classifyDial sorts a connect error.
func classifyDial(err error) outcome {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return refused
	case errors.As(err, &ne) && ne.Timeout():
		return dialTimeout
	default:
		return dialOther
	}
}

// classifyRequest sorts an error from writing the request or reading the
// answer on a connected socket.
func classifyRequest(err error) outcome {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return requestTimeout
	}
	return closedEarly // EOF, ECONNRESET, EPIPE: the server let go
}

// probe is the state of a server process at one moment.
type probe struct {
	name       string
	rssKiB     int64
	fds        int
	threads    int64
	goroutines float64 // -1 unknown
}

func takeProbe(ctx context.Context, s *session, name string) probe {
	p := probe{name: name, goroutines: -1}
	p.rssKiB, _ = harness.ReadStatusField(s.PID(), "VmRSS")
	p.threads, _ = harness.ReadStatusField(s.PID(), "Threads")
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.PID())); err == nil {
		p.fds = len(ents)
	}
	if m, err := s.Metrics(ctx); err == nil {
		if v, ok := m["go_goroutines"]; ok {
			p.goroutines = v
		}
	}
	return p
}

// raiseNofile raises this process's RLIMIT_NOFILE to at least need (the
// hard limit too, which needs privilege), and returns the limit in force.
// chalupa, started afterwards, inherits it.
func raiseNofile(need uint64) (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur >= need {
		return rl.Cur, nil
	}
	want := rl
	want.Cur = need
	if want.Max < need {
		want.Max = need
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		// Not privileged: go as far as the hard limit.
		want = rl
		want.Cur = rl.Max
		if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err2 != nil {
			return rl.Cur, err2
		}
		return want.Cur, fmt.Errorf("could not raise the hard limit to %d: %w", need, err)
	}
	return want.Cur, nil
}

// nofileOf reads "Max open files" (soft) of /proc/<pid>/limits.
func nofileOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				return f[0]
			}
		}
	}
	return "?"
}

func runSlowClients(args []string) error {
	fs := flag.NewFlagSet("slowclients", flag.ContinueOnError)
	var c common
	c.register(fs)
	n := fs.Int("conns", 5000, "connections to open")
	mode := fs.String("mode", "keepalive", "keepalive: one GET /api/health on each, then idle; silent: connect and send nothing")
	hold := fs.Duration("hold", 60*time.Second, "how long the connections are held idle (chalupa closes keep-alive connections idle for 120 s, and silent ones after its 10 s header timeout)")
	conc := fs.Int("concurrency", 64, "connections being opened at once")
	timeout := fs.Duration("timeout", 10*time.Second, "per connect and per request")
	settle := fs.Duration("settle", 5*time.Second, "wait after start-up, and after closing, before reading memory")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	switch {
	case *n < 1 || *n > 25_000:
		return errors.New("-conns must be in [1, 25000] (the loopback ephemeral port range bounds it)")
	case *mode != "keepalive" && *mode != "silent":
		return errors.New("-mode must be keepalive or silent")
	case *hold < 0 || *hold > time.Hour:
		return errors.New("-hold must be in [0, 1h]")
	case *conc < 1 || *conc > 1024:
		return errors.New("-concurrency must be in [1, 1024]")
	case *timeout <= 0 || *timeout > time.Minute:
		return errors.New("-timeout must be in (0, 1m]")
	case *settle < 0 || *settle > 10*time.Minute:
		return errors.New("-settle must be in [0, 10m]")
	}
	limit, rlErr := raiseNofile(uint64(*n) + 512)
	if rlErr != nil {
		progress("RLIMIT_NOFILE: %v (now %d)", rlErr, limit)
	}
	ctx, cancel := runContext(2**settle + *hold + time.Duration(*n/(*conc)+1)*2**timeout + 2*harness.ChalupaStopGrace + 10*time.Minute)
	defer cancel()

	s, err := c.start(ctx, "slowclients")
	if err != nil {
		return err
	}
	defer s.close()
	u, err := url.Parse(s.URL)
	if err != nil {
		return err
	}
	addr := u.Host
	harness.SleepUntil(ctx, time.Now().Add(*settle))
	probes := []probe{takeProbe(ctx, s, "baseline")}

	progress("slowclients: opening %d %s connections, %d at a time", *n, *mode, *conc)
	conns := make([]net.Conn, *n)
	outcomes := make([]outcome, *n)
	statuses := map[int]int{}
	var mu sync.Mutex
	work := make(chan int)
	var wg sync.WaitGroup
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				o, status, conn := openOne(ctx, addr, *mode, *timeout)
				outcomes[i], conns[i] = o, conn
				if status != 0 {
					mu.Lock()
					statuses[status]++
					mu.Unlock()
				}
			}
		}()
	}
	opened := time.Now()
feed:
	for i := range *n {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	openTook := time.Since(opened)
	if *mode == "silent" {
		silentCheck(conns, outcomes, statuses, *conc)
	}
	defer func() {
		for _, cn := range conns {
			if cn != nil {
				cn.Close()
			}
		}
	}()
	probes = append(probes, takeProbe(ctx, s, "all opened"))
	var count [nOutcomes]int
	for _, o := range outcomes {
		count[o]++
	}

	progress("slowclients: holding for %s", *hold)
	harness.SleepUntil(ctx, time.Now().Add(*hold))
	probes = append(probes, takeProbe(ctx, s, "after hold"))
	open, closed := stillOpen(conns, *conc)

	for i, cn := range conns {
		if cn != nil {
			cn.Close()
			conns[i] = nil
		}
	}
	harness.SleepUntil(ctx, time.Now().Add(*settle))
	probes = append(probes, takeProbe(ctx, s, fmt.Sprintf("closed +%s", *settle)))
	if err := ctx.Err(); err != nil {
		return err
	}

	out := os.Stdout
	what := "each connection sends one GET /api/health (HTTP/1.1 keep-alive), reads the answer, then stays idle"
	if *mode == "silent" {
		what = "each connection connects and sends nothing"
	}
	fmt.Fprintf(out, "slowclients: chalupa %s, pid %d%s; %d connections, %s; RLIMIT_NOFILE client %d, chalupa %s\n\n",
		s.URL, s.PID(), placement(c.cpus), *n, what, limit, nofileOf(s.PID()))
	fmt.Fprintf(out, "opened in %.1fs:", openTook.Seconds())
	for o := range nOutcomes {
		fmt.Fprintf(out, " %s %d;", outcomeNames[o], count[o])
	}
	fmt.Fprintln(out)
	if len(statuses) > 0 {
		codes := slices.Sorted(maps.Keys(statuses))
		fmt.Fprint(out, "answers by status:")
		for _, code := range codes {
			fmt.Fprintf(out, " %d×%d", code, statuses[code])
		}
		fmt.Fprintln(out)
	}
	if count[accepted] < *n {
		fmt.Fprintln(out, "note: this tool's own /metrics connection, kept alive since the baseline, holds one more of chalupa's connections")
	}
	fmt.Fprintf(out, "after holding %s: %d still open, %d closed by the server\n\n", *hold, open, closed)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "chalupa\tRSS MiB\tfds\tthreads\tgoroutines\t")
	for _, p := range probes {
		g := "-"
		if p.goroutines >= 0 {
			g = fmt.Sprintf("%.0f", p.goroutines)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%d\t%s\t\n", p.name, float64(p.rssKiB)/1024, p.fds, p.threads, g)
	}
	tw.Flush()
	if a := count[accepted]; a > 0 {
		base, top := probes[0], probes[1]
		fmt.Fprintf(out, "\nper accepted connection (all opened − baseline, / %d): %+.1f KiB RSS, %+.2f fds, %+.2f goroutines\n",
			a, float64(top.rssKiB-base.rssKiB)/float64(a), float64(top.fds-base.fds)/float64(a), (top.goroutines-base.goroutines)/float64(a))
	}
	return nil
}

// openOne connects to addr and, in keepalive mode, makes one request. It
// returns the connection when it is accepted (nil otherwise) and the HTTP
// status of the answer, if any.
func openOne(ctx context.Context, addr, mode string, timeout time.Duration) (outcome, int, net.Conn) {
	d := net.Dialer{Timeout: timeout, KeepAlive: -1} // no TCP keep-alive probes: idle means idle
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return classifyDial(err), 0, nil
	}
	if mode == "silent" {
		return accepted, 0, conn // for now: silentCheck looks again once all are open
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, "GET /api/health HTTP/1.1\r\nHost: "+addr+"\r\nUser-Agent: chalupa-soak\r\n\r\n"); err != nil {
		conn.Close()
		return classifyRequest(err), 0, nil
	}
	br := bufio.NewReaderSize(conn, 1024)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return classifyRequest(err), 0, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	_ = conn.SetDeadline(time.Time{})
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return otherStatus, resp.StatusCode, nil
	}
	if resp.Close {
		// The server answered but will not keep the connection.
		conn.Close()
		return closedEarly, resp.StatusCode, nil
	}
	return accepted, resp.StatusCode, conn
}

// silentAnswer classifies a silent connection by what the server has done
// with it, waiting at most wait: nothing (accepted: the connection is open
// and idle), closed it (closedEarly), or answered without being asked
// (otherStatus, with the status) — what a server over its connection cap
// does as soon as it accepts. A connection that is not accepted is closed.
func silentAnswer(conn net.Conn, wait time.Duration) (outcome, int, net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	br := bufio.NewReaderSize(conn, 1024)
	if _, err := br.Peek(1); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			_ = conn.SetReadDeadline(time.Time{})
			return accepted, 0, conn
		}
		conn.Close()
		return closedEarly, 0, nil
	}
	defer conn.Close()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return closedEarly, 0, nil
	}
	resp.Body.Close()
	return otherStatus, resp.StatusCode, nil
}

// silentCheck classifies every open silent connection with silentAnswer,
// once all are open: by then a server over its cap has long answered or
// closed the ones beyond it, while the 10 s header timeout has not yet
// closed the rest. Refused ones are closed and dropped from conns.
func silentCheck(conns []net.Conn, outcomes []outcome, statuses map[int]int, conc int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				o, status, conn := silentAnswer(conns[i], 5*time.Millisecond)
				outcomes[i], conns[i] = o, conn
				if status != 0 {
					mu.Lock()
					statuses[status]++
					mu.Unlock()
				}
			}
		}()
	}
	for i, cn := range conns {
		if cn != nil {
			work <- i
		}
	}
	close(work)
	wg.Wait()
}

// stillOpen checks, without sending anything, which connections the server
// has closed: a read that returns at once with EOF or a reset means closed,
// a read that times out means the connection is still open and idle.
func stillOpen(conns []net.Conn, conc int) (open, closed int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan net.Conn)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b [1]byte
			for cn := range work {
				_ = cn.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
				_, err := cn.Read(b[:])
				var ne net.Error
				isOpen := errors.As(err, &ne) && ne.Timeout()
				mu.Lock()
				if isOpen {
					open++
				} else {
					closed++
				}
				mu.Unlock()
			}
		}()
	}
	for _, cn := range conns {
		if cn != nil {
			work <- cn
		}
	}
	close(work)
	wg.Wait()
	return open, closed
}
