package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// adminAlertsCmd is `chalupa admin alerts`: the operator's alert surfaces
// (docs/operations.md, "Alerts", operating alerts).
type adminAlertsCmd struct {
	List   adminAlertsListCmd   `cmd:"" default:"withargs" help:"Show open and recent alerts, each sink's delivery state and the mutes in force (the default)."`
	Test   adminAlertsTestCmd   `cmd:"" help:"Send a test message now to every sink (or --sink NAME) and say what each answered; exit 1 if any failed."`
	Ack    adminAlertsAckCmd    `cmd:"" help:"Acknowledge an open alert: no repeats until it resolves (its end is still sent)."`
	Mute   adminAlertsMuteCmd   `cmd:"" help:"Mute a kind of alert for at most 24h: its alerts open and resolve without messages (recorded as an event)."`
	Unmute adminAlertsUnmuteCmd `cmd:"" help:"End a kind's mute early (recorded as an event)."`
}

// Help is the alerts command's examples.
func (*adminAlertsCmd) Help() string {
	return `Examples:
  chalupa admin alerts                           open and recent alerts, sinks, mutes
  chalupa admin alerts test                      a test message to every sink
  chalupa admin alerts test --sink webhook       to one sink
  chalupa admin alerts ack 01JEXAMPLEALERTID     stop an open alert's repeats
  chalupa admin alerts mute clock-suspect --for 2h
  chalupa admin alerts unmute clock-suspect`
}

type adminAlertsListCmd struct {
	Recent int64 `default:"20" help:"How many resolved alerts to show, latest first (1–200)."`
	JSON   bool  `help:"Print JSON."`
}

func (*adminAlertsListCmd) operation() string { return adminapi.OpListAlerts }

// Run lists alerts.
func (c *adminAlertsListCmd) Run(a *adminCmd) error {
	if c.Recent < 1 || c.Recent > 200 {
		// 0 would be sent as absent, the default (docs/operations.md, "Alerts").
		return &exitError{code: 2, err: fmt.Errorf("alerts list: --recent must be 1–200 (got %d)", c.Recent)}
	}
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.AlertList, error) {
		return cl.ListAlerts(ctx, c.Recent)
	}, printAlerts)
}

// printAlerts prints the open alerts, the sinks, the mutes and the recent
// alerts, each as a table.
func printAlerts(w io.Writer, l adminapi.AlertList) error {
	tw := table(w)
	if len(l.Open) == 0 {
		fmt.Fprintln(tw, "open alerts: none")
	} else {
		fmt.Fprintln(tw, "OPEN\tSEVERITY\tKIND\tSUBJECT\tSINCE\tSTATE")
		for _, al := range l.Open {
			state := "repeating"
			switch {
			case al.Muted:
				state = "muted"
			case !al.AckedAt.IsZero():
				state = "acknowledged " + timeOrDash(al.AckedAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", al.ID, al.Severity, al.Kind, subjectText(al.Subject), timeOrDash(al.OpenedAt), state)
		}
	}
	fmt.Fprintln(tw)
	printSinks(tw, l.Sinks)
	for _, m := range l.Mutes {
		fmt.Fprintf(tw, "muted %s\tuntil %s\n", m.Kind, timeOrDash(m.Until))
	}
	if len(l.Recent) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "RECENT\tSEVERITY\tKIND\tSUBJECT\tOPENED\tRESOLVED")
		for _, al := range l.Recent {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", al.ID, al.Severity, al.Kind, subjectText(al.Subject), timeOrDash(al.OpenedAt), timeOrDash(al.ResolvedAt))
		}
	}
	return tw.Flush()
}

// printSinks prints one line per alert sink (also `admin status`).
func printSinks(w io.Writer, sinks []adminapi.AlertSinkState) {
	if len(sinks) == 0 {
		fmt.Fprintln(w, "alert sinks\tnone configured: alerts are recorded, nothing is sent (CHALUPA_ALERT_SMTP_URL, CHALUPA_ALERT_WEBHOOK_URL)")
		return
	}
	for _, s := range sinks {
		state := "ok"
		if !s.FailingSince.IsZero() {
			state = fmt.Sprintf("FAILING since %s (%s)", timeOrDash(s.FailingSince), s.LastError)
		}
		fmt.Fprintf(w, "alert sink %s\t%s; last delivery %s; %d pending\n", displayText(s.Name), state, timeOrDash(s.LastDeliveredAt), s.Pending)
	}
}

func subjectText(s adminapi.AlertSubject) string {
	if s.ID == "" {
		return displayText(s.Kind)
	}
	return displayText(s.Kind + " " + s.ID)
}

type adminAlertsTestCmd struct {
	Sink string `placeholder:"NAME" help:"Only this sink (email or webhook)."`
	JSON bool   `help:"Print JSON."`
}

func (*adminAlertsTestCmd) operation() string { return adminapi.OpTestAlertSinks }

// errTestFailed is the test command's exit 1 when a sink did not accept
// the message; the lines above it say which and why.
var errTestFailed = &exitError{code: 1, err: errors.New("a sink did not accept the test message")}

// Run sends the test message.
func (c *adminAlertsTestCmd) Run(a *adminCmd) error {
	var failed bool
	err := runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.AlertTest, error) {
		t, err := cl.TestAlertSinks(ctx, c.Sink)
		for _, r := range t.Results {
			failed = failed || !r.Delivered
		}
		return t, err
	}, func(w io.Writer, t adminapi.AlertTest) error {
		for _, r := range t.Results {
			if r.Delivered {
				fmt.Fprintf(w, "%s: delivered (message %s)\n", displayText(r.Sink), r.MessageID)
				continue
			}
			fmt.Fprintf(w, "%s: FAILED, %s: %s\n", displayText(r.Sink), r.Failure, displayText(r.Detail))
		}
		return nil
	})
	if err == nil && failed {
		return errTestFailed
	}
	return err
}

type adminAlertsAckCmd struct {
	ID   string `arg:"" help:"The alert's id (from 'chalupa admin alerts')."`
	JSON bool   `help:"Print JSON."`
}

func (*adminAlertsAckCmd) operation() string { return adminapi.OpAckAlert }

// Run acknowledges an alert.
func (c *adminAlertsAckCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.Alert, error) {
		return cl.AckAlert(ctx, c.ID)
	}, func(w io.Writer, al adminapi.Alert) error {
		_, err := fmt.Fprintf(w, "alert %s (%s on %s) acknowledged at %s: no repeats until it resolves\n", al.ID, al.Kind, subjectText(al.Subject), timeOrDash(al.AckedAt))
		return err
	})
}

type adminAlertsMuteCmd struct {
	Kind string        `arg:"" help:"The condition's kind, e.g. clock-suspect (docs/operations.md, \"Alerts\", Conditions)."`
	For  time.Duration `required:"" help:"How long, at most 24h (e.g. 2h, 30m)."`
	JSON bool          `help:"Print JSON."`
}

func (*adminAlertsMuteCmd) operation() string { return adminapi.OpMuteAlertKind }

// Run mutes a kind.
func (c *adminAlertsMuteCmd) Run(a *adminCmd) error {
	if c.For <= 0 || c.For > adminapi.MaxAlertMute {
		return &exitError{code: 2, err: fmt.Errorf("alerts mute: --for must be more than 0 and at most %s (got %s)", adminapi.MaxAlertMute, c.For)}
	}
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.AlertMute, error) {
		return cl.MuteAlertKind(ctx, c.Kind, c.For)
	}, func(w io.Writer, m adminapi.AlertMute) error {
		_, err := fmt.Fprintf(w, "alerts of kind %s muted until %s\n", displayText(m.Kind), timeOrDash(m.Until))
		return err
	})
}

type adminAlertsUnmuteCmd struct {
	Kind string `arg:"" help:"The muted kind."`
	JSON bool   `help:"Print JSON."`
}

func (*adminAlertsUnmuteCmd) operation() string { return adminapi.OpUnmuteAlertKind }

// Run ends a mute.
func (c *adminAlertsUnmuteCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.AlertUnmuted, error) {
		return cl.UnmuteAlertKind(ctx, c.Kind)
	}, func(w io.Writer, u adminapi.AlertUnmuted) error {
		state := "unmuted"
		if !u.Unmuted {
			_, err := fmt.Fprintf(w, "%s was not muted\n", displayText(u.Kind))
			return err
		}
		_, err := fmt.Fprintf(w, "alerts of kind %s %s\n", displayText(u.Kind), state)
		return err
	})
}
