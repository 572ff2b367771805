package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

type adminReaperCmd struct {
	Tick   adminReaperTickCmd   `cmd:"" help:"Run one reaper tick now and show what it did."`
	Status adminReaperStatusCmd `cmd:"" help:"Show the next wake-up, due deployments, the last tick and the dry-run flag."`
}

type adminReaperTickCmd struct {
	JSON bool `help:"Print JSON."`
}

func (*adminReaperTickCmd) operation() string { return adminapi.OpRunReaperTick }

// Run runs one tick.
func (c *adminReaperTickCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).RunReaperTick, func(w io.Writer, t adminapi.ReaperTick) error {
		return printTick(w, t)
	})
}

func printTick(w io.Writer, t adminapi.ReaperTick) error {
	mode := ""
	if t.DryRun {
		mode = " (dry run: nothing destroyed)"
	}
	fmt.Fprintf(w, "tick at %s%s: %d deployment(s) handled\n", timeOrDash(t.At), mode, len(t.Outcomes))
	if !t.RateLimitedUntil.IsZero() {
		fmt.Fprintf(w, "write token rate-limited until %s\n", timeOrDash(t.RateLimitedUntil))
	}
	if t.More {
		fmt.Fprintln(w, "more deployments are due: the next tick continues")
	}
	if len(t.Outcomes) == 0 {
		return nil
	}
	tw := table(w)
	fmt.Fprintln(tw, "ENVIRONMENT\tDEPLOYMENT\tDROPLET\tACTION\tREASON\tDETAIL")
	for _, o := range t.Outcomes {
		drop := "-"
		if o.DropletID != 0 {
			drop = fmt.Sprint(o.DropletID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.Environment, o.Deployment, drop, o.Action, o.Reason, o.Detail)
	}
	return tw.Flush()
}

type adminReaperStatusCmd struct {
	JSON bool `help:"Print JSON."`
}

func (*adminReaperStatusCmd) operation() string { return adminapi.OpGetReaperStatus }

// Run prints the reaper's status.
func (c *adminReaperStatusCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (reaperStatusAnswer, error) {
		return adminapi.CallAs[reaperStatusAnswer](ctx, cl, adminapi.OpGetReaperStatus, nil)
	}, func(w io.Writer, st reaperStatusAnswer) error {
		tw := table(w)
		mode := ""
		if st.Mode != nil {
			mode = *st.Mode
		}
		off := mode == "off"
		fmt.Fprintf(tw, "mode\t%s\n", modeText(st.Mode))
		switch {
		case st.TokenConfigured && off:
			fmt.Fprintln(tw, "write token\tconfigured (unused while the reaper is off)")
		case st.TokenConfigured:
			fmt.Fprintln(tw, "write token\tconfigured")
		default:
			fmt.Fprintln(tw, "write token\tnot set: the reaper does not run (docs/operations.md, \"Reaper\")")
		}
		fmt.Fprintf(tw, "CI freshness\t%s\n", time.Duration(st.CIFreshnessSeconds*float64(time.Second)))
		fmt.Fprintf(tw, "next wake-up\t%s\n", nextWakeText(st.ReaperStatus, mode))
		if !st.RateLimitedUntil.IsZero() {
			fmt.Fprintf(tw, "rate-limited until\t%s\n", timeOrDash(st.RateLimitedUntil))
		}
		pace := unknownText
		if st.MaxDestroyPerMinute != nil {
			pace = fmt.Sprintf("%d a minute", *st.MaxDestroyPerMinute)
		}
		fmt.Fprintf(tw, "destroy pace\t%s\n", pace)
		if st.Clock == nil {
			fmt.Fprintf(tw, "clock guard\t%s\n", unknownText)
		} else {
			for _, l := range clockLines(*st.Clock) {
				fmt.Fprintf(tw, "%s\n", l)
			}
		}
		// The holds are the running reaper's; off, nothing runs to hold.
		if !st.GraceUntil.IsZero() && !off {
			fmt.Fprintf(tw, "start-up grace until\t%s (idle destruction waits for deployments without a heartbeat since)\n", timeOrDash(st.GraceUntil))
		}
		if !st.StorageHeldUntil.IsZero() && !off {
			fmt.Fprintf(tw, "storage hold until\t%s (heartbeats could not be stored: idle destruction held)\n", timeOrDash(st.StorageHeldUntil))
		}
		fmt.Fprintf(tw, "active deployments\t%d\n", st.ActiveDeployments)
		due := fmt.Sprint(len(st.Due))
		if len(st.Due) > 0 && (off || !st.TokenConfigured) {
			due += " (the reaper is off: nothing is destroyed)"
		}
		fmt.Fprintf(tw, "due now\t%s\n", due)
		fmt.Fprintf(tw, "held now\t%d\n", st.HeldTotal)
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(st.Held) > 0 {
			tw = table(w)
			fmt.Fprintln(tw, "\nENVIRONMENT\tDEPLOYMENT\tDROPLET\tHOLD\tUNTIL\tMAX\tEVIDENCE")
			for _, h := range st.Held {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", h.Environment, h.Deployment, h.DropletID, dash(h.Reason), timeOrDash(h.Until),
					time.Duration(h.MaxSeconds*float64(time.Second)), dash(h.Evidence))
			}
			if len(st.Held) < st.HeldTotal {
				fmt.Fprintf(tw, "… and %d more\n", st.HeldTotal-len(st.Held))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if len(st.Due) > 0 {
			tw = table(w)
			fmt.Fprintln(tw, "\nENVIRONMENT\tDEPLOYMENT\tDROPLET\tDUE SINCE\tIDLE DEADLINE\tSESSION EXPIRES\tCI")
			for _, d := range st.Due {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%v\n", d.Environment, d.Deployment, d.DropletID, timeOrDash(d.DecideAt),
					timeOrDash(d.IdleDeadlineAt), timeOrDash(d.SessionExpiresAt), d.CIActive)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if st.LastTick == nil {
			fmt.Fprintln(w, "last tick: none yet")
			return nil
		}
		fmt.Fprint(w, "last ")
		return printTick(w, *st.LastTick)
	})
}

// modeText is the reaper mode in words (docs/operations.md,
// "Configuration"): what each mode does to a due deployment; unknown when
// the daemon did not answer it.
func modeText(mode *string) string {
	if mode == nil {
		return unknownText
	}
	switch *mode {
	case "off":
		return "off: the reaper does not run; nothing is destroyed, whatever is due"
	case "dry-run":
		return "dry-run: due deployments are recorded as reaper-would-destroy events; nothing is destroyed"
	}
	return *mode
}

// nextWakeText is the status's next wake-up, or why there is none: the
// reaper is off (or has no token), no deployment is active, or the loop
// has not planned one (it waits for a heartbeat or has not run since
// start). mode is the answered mode, "" when the daemon did not say.
func nextWakeText(st adminapi.ReaperStatus, mode string) string {
	switch {
	case !st.NextWakeAt.IsZero():
		return timeOrDash(st.NextWakeAt)
	case mode == "off" || !st.TokenConfigured:
		return "none (the reaper is off)"
	case st.ActiveDeployments == 0:
		return "none (no active deployment: waits for a heartbeat)"
	}
	return "none planned yet (the reaper loop has not run since start, is paused, or waits for a heartbeat: chalupa admin loops)"
}

// clockLines are the clock guard's rows for a status table
// (docs/operations.md, "Reaper").
func clockLines(c adminapi.ClockGuard) []string {
	hold := func(h adminapi.ClockHold) string {
		s := fmt.Sprintf("%s since %s, server clock %+.0fs off the fleet", h.Reason, timeOrDash(h.Since), h.OffsetSeconds)
		if h.Agreed {
			s += "; the fleet agrees again, lifting once every deployment heartbeats"
		}
		if !h.SessionsHeld {
			s += "; session expiry enforced again (1 h cap passed)"
		}
		return s
	}
	if c.Suspect && c.Hold != nil {
		return []string{"clock guard\tSUSPECT: the reaper destroys nothing: " + hold(*c.Hold)}
	}
	return []string{"clock guard\tok"}
}

type adminEventsCmd struct {
	Env  string `name:"env" help:"Only this environment's events (slug)."`
	Kind string `name:"kind" help:"Only events of this kind (reaper-destroyed, reaper-warning, reaper-would-destroy, quota-exceeded, …)."`
	JSON bool   `help:"Print JSON."`
}

func (*adminEventsCmd) operation() string { return adminapi.OpListEvents }

// Run lists lifecycle events, newest first.
func (c *adminEventsCmd) Run(a *adminCmd) error {
	list := func(cl *adminapi.Client, ctx context.Context) (adminapi.EventList, error) {
		return cl.ListEvents(ctx, adminapi.ListEventsRequest{Environment: c.Env, Kind: c.Kind})
	}
	return runOp(a, c.JSON, list, func(w io.Writer, l adminapi.EventList) error {
		tw := table(w)
		fmt.Fprintln(tw, "OCCURRED\tENVIRONMENT\tDEPLOYMENT\tKIND\tREASON\tMESSAGE")
		for _, e := range l.Events {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", timeOrDash(e.OccurredAt), dash(e.Environment), dash(e.Deployment), e.Kind, dash(e.Reason), e.Message)
		}
		return tw.Flush()
	})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
