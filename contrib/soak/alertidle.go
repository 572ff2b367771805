package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
)

// alertIdleArm is one side of the alertidle comparison.
type alertIdleArm struct {
	name   string
	alerts bool
}

// alertIdleRow is one measured daemon of the alertidle comparison.
type alertIdleRow struct {
	round int
	arm   string
	wall  time.Duration
	cpu   float64
	sw    harness.Switches
}

// runAlertIdle compares the idle wake-ups of the same build with alerts
// configured (a webhook to a loopback receiver this tool runs, and no alert
// open) and with alerts off, interleaved: each round starts one daemon of
// each arm in turn (the first arm alternating between rounds), lets it
// settle and counts its voluntary context switches over -interval
// (docs/operations.md, "Alerts": no timer runs while no alert is open).
func runAlertIdle(args []string) error {
	fs := flag.NewFlagSet("alertidle", flag.ContinueOnError)
	var c common
	c.register(fs)
	rounds := fs.Int("rounds", 3, "how many rounds (one daemon of each arm per round)")
	interval := fs.Duration("interval", time.Minute, "measured time per daemon")
	settle := fs.Duration("settle", 30*time.Second, "wait this long after start-up before measuring")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	switch {
	case *rounds < 1 || *rounds > 100:
		return errors.New("-rounds must be in [1, 100]")
	case *interval < time.Second || *interval > time.Hour:
		return errors.New("-interval must be in [1s, 1h]")
	case *settle < 0 || *settle > time.Hour:
		return errors.New("-settle must be in [0, 1h]")
	}
	per := *settle + *interval + 2*harness.ChalupaStopGrace + time.Minute
	ctx, cancel := runContext(time.Duration(2**rounds)*per + 10*time.Minute)
	defer cancel()

	// The receiver: answers 204 and counts what it took (nothing, if no
	// alert opens).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var took atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		took.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	alertEnv := []string{
		"CHALUPA_ALERT_WEBHOOK_URL=http://" + ln.Addr().String() + "/hooks/soak",
		"CHALUPA_ALERT_WEBHOOK_SECRET=whsec_" + base64.StdEncoding.EncodeToString(key),
	}

	if c.bin == "" {
		root, err := harness.FindRepoRoot()
		if err != nil {
			return err
		}
		progress("building %s", root+"/tmp/chalupa")
		if c.bin, err = harness.BuildChalupa(ctx, root); err != nil {
			return err
		}
	}
	base := append([]string(nil), c.env...)
	arms := []alertIdleArm{{"alerts off", false}, {"alerts on", true}}
	var rows []alertIdleRow
	for r := 0; r < *rounds && ctx.Err() == nil; r++ {
		order := arms
		if r%2 == 1 {
			order = []alertIdleArm{arms[1], arms[0]}
		}
		for _, arm := range order {
			c.env = append([]string(nil), base...)
			if arm.alerts {
				c.env = append(c.env, alertEnv...)
			}
			row, err := alertIdleOne(ctx, &c, *settle, *interval)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, arm.name, err)
			}
			row.round, row.arm = r+1, arm.name
			rows = append(rows, row)
			progress("alertidle: round %d/%d, %s: %.2f wake-ups/s", r+1, *rounds, arm.name, float64(row.sw.Voluntary)/row.wall.Seconds())
		}
	}
	if len(rows) == 0 {
		return ctx.Err()
	}

	out := os.Stdout
	fmt.Fprintf(out, "alertidle: the same chalupa build%s, embedded default (file:// replica in the data dir), no clients; per daemon: settled %s, then %s measured; %d rounds interleaved\n",
		placement(c.cpus), *settle, *interval, len(rows)/2)
	fmt.Fprintf(out, "alerts on: CHALUPA_ALERT_WEBHOOK_URL to a loopback receiver, no alert open (the receiver took %d requests)\n\n", took.Load())
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tarm\tvoluntary\tinvoluntary\twake-ups/s\tCPU ms\t")
	sum := map[string]alertIdleRow{}
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.2f\t%.0f\t\n", r.round, r.arm, r.sw.Voluntary, r.sw.Nonvoluntary, float64(r.sw.Voluntary)/r.wall.Seconds(), r.cpu*1000)
		s := sum[r.arm]
		s.wall += r.wall
		s.cpu += r.cpu
		s.sw.Voluntary += r.sw.Voluntary
		s.sw.Nonvoluntary += r.sw.Nonvoluntary
		sum[r.arm] = s
	}
	tw.Flush()
	rate := func(arm string) float64 { return float64(sum[arm].sw.Voluntary) / sum[arm].wall.Seconds() }
	fmt.Fprintln(out)
	for _, a := range arms {
		fmt.Fprintf(out, "%s: %.2f wake-ups/s (voluntary context switches, all threads), CPU %.0f ms per minute\n",
			a.name, rate(a.name), sum[a.name].cpu*1000/sum[a.name].wall.Minutes())
	}
	if off := rate("alerts off"); off > 0 {
		fmt.Fprintf(out, "ratio alerts on / alerts off: %.3f× (target ≤ 1.1×)\n", rate("alerts on")/off)
	}
	return nil
}

// alertIdleOne starts one daemon with c, waits settle and counts its
// switches and CPU over interval.
func alertIdleOne(ctx context.Context, c *common, settle, interval time.Duration) (alertIdleRow, error) {
	s, err := c.start(ctx, "alertidle")
	if err != nil {
		return alertIdleRow{}, err
	}
	defer s.close()
	pid := s.PID()
	harness.SleepUntil(ctx, time.Now().Add(settle))
	sw0, err := harness.ReadTaskSwitches(pid)
	if err != nil {
		return alertIdleRow{}, err
	}
	cpu0, t0 := harness.ProcCPUSeconds(strconv.Itoa(pid)), time.Now()
	harness.SleepUntil(ctx, t0.Add(interval))
	sw1, err := harness.ReadTaskSwitches(pid)
	if err != nil {
		return alertIdleRow{}, err
	}
	r := alertIdleRow{wall: time.Since(t0), cpu: harness.ProcCPUSeconds(strconv.Itoa(pid)) - cpu0}
	r.sw, _ = harness.SwitchesDelta(sw0, sw1)
	return r, ctx.Err()
}
