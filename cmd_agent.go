package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/signer"
	"github.com/chalupa-run/chalupa/internal/origin"
)

type agentCmd struct {
	Heartbeat   agentHeartbeatCmd   `cmd:"" help:"Send signed heartbeats (the reference agent)."`
	SystemdUnit agentSystemdUnitCmd `cmd:"" name:"systemd-unit" help:"Print the agent's systemd unit (the cloud-init install writes it)."`
}

type agentHeartbeatCmd struct {
	URL              string        `required:"" help:"Daemon origin, e.g. https://chalupa.example.com."`
	KeyID            string        `name:"key-id" required:"" help:"Ingest key id (the key-id file written by 'admin keys issue --out')."`
	KeyFile          string        `name:"key-file" required:"" help:"File holding the key material (ingest.key)."`
	Env              string        `required:"" help:"Environment slug the key is bound to."`
	Deployment       string        `required:"" help:"Deployment id (one droplet's life)."`
	DropletID        int64         `name:"droplet-id" help:"DigitalOcean droplet id."`
	Region           string        `help:"Droplet region slug."`
	Size             string        `help:"Droplet size slug."`
	LimitMinutes     int64         `name:"limit-minutes" default:"30" help:"Idle limit in minutes."`
	ActivityFile     string        `name:"activity-file" help:"Existing file whose modification time is the last user activity (default: agent start time)."`
	CIActive         bool          `name:"ci-active" help:"Report a live CI suite (defers idle shutdown)."`
	SessionExpiresAt time.Time     `name:"session-expires-at" help:"Absolute session expiry (RFC 3339)." format:"2006-01-02T15:04:05Z07:00"`
	Every            time.Duration `help:"Send every interval until interrupted (0: send once)." default:"0s"`
	Count            int           `help:"Stop after this many heartbeats (0: no limit)."`
	Retries          int           `default:"3" help:"Retries of a 5xx answer, each with a fresh nonce."`

	// lastActivity is the activity time last read from --activity-file;
	// activityGone is set once its disappearance has been reported.
	lastActivity time.Time
	activityGone bool
}

// Run sends heartbeats and prints each answer's status. It exits non-zero
// when the last answer was not 2xx.
func (c *agentHeartbeatCmd) Run() error {
	// The URL's rule is checked on the value alone: breaking it is a usage
	// mistake (2). The files are checked against the disk: a missing,
	// unreadable or exposed file is a refusal (1), the same for --key-file
	// and --activity-file (docs/operations.md, "Exit codes").
	if err := origin.CheckDaemonURL("--url", "fleet heartbeats", c.URL); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if fi, err := os.Stat(c.KeyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return &exitError{code: 1, err: fmt.Errorf("--key-file is readable by group or others (chmod 600 %s)", c.KeyFile)}
	}
	b, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("read --key-file: %w", err)}
	}
	key, err := signer.DecodeKeyMaterial(string(b))
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("--key-file: %w", err)}
	}
	started := time.Now().UTC()
	c.lastActivity = started
	if c.ActivityFile != "" {
		// Named explicitly, so a typo must not quietly turn into "active
		// since the agent started" (which defers the reaper).
		fi, err := os.Stat(c.ActivityFile)
		if err != nil {
			return &exitError{code: 1, err: fmt.Errorf("--activity-file: %w (it must exist: its modification time is the last user activity)", err)}
		}
		c.lastActivity = fi.ModTime().UTC()
	}
	cl := &signer.Client{BaseURL: c.URL, KeyID: strings.TrimSpace(c.KeyID), Key: key, Retries: c.Retries}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	sent, ok := 0, false
	for {
		ok, err = c.send(ctx, cl)
		if err != nil {
			fmt.Fprintln(os.Stderr, "heartbeat:", err)
		}
		sent++
		if c.Every <= 0 || (c.Count > 0 && sent >= c.Count) {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.Every):
		}
	}
	if !ok {
		return &exitError{code: 1}
	}
	return nil
}

// activity returns the last user activity: --activity-file's mtime, else
// (no file given) the agent's start. A file that disappears after start is
// reported once on stderr and the last mtime read stays the answer: the
// start time could be later than it and defer the reaper.
func (c *agentHeartbeatCmd) activity() time.Time {
	if c.ActivityFile == "" {
		return c.lastActivity
	}
	fi, err := os.Stat(c.ActivityFile)
	if err != nil {
		if !c.activityGone {
			c.activityGone = true
			fmt.Fprintf(os.Stderr, "heartbeat: --activity-file: %v; reporting the last activity seen (%s) until it is back\n", err, c.lastActivity.Format(time.RFC3339))
		}
		return c.lastActivity
	}
	c.activityGone = false
	c.lastActivity = fi.ModTime().UTC()
	return c.lastActivity
}

func (c *agentHeartbeatCmd) send(ctx context.Context, cl *signer.Client) (bool, error) {
	last := c.activity()
	// An mtime ahead of this clock is no activity later than now (and
	// would make idleChecks negative, which the daemon refuses).
	if now := time.Now().UTC(); last.After(now) {
		last = now
	}
	hb := ingest.HeartbeatV1{
		EnvironmentSlug: c.Env,
		Deployment:      ingest.HeartbeatDeploy{ID: c.Deployment, DropletID: c.DropletID, Region: c.Region, Size: c.Size},
		AgentVersion:    "chalupa-agent/" + daemon.Version,
		SentAt:          time.Now().UTC(),
		Reaper: ingest.ReaperObservation{
			IdleChecks:     int64(time.Since(last) / time.Minute),
			LimitMinutes:   c.LimitMinutes,
			LastActivityAt: last,
			CIActive:       c.CIActive,
		},
	}
	if !c.SessionExpiresAt.IsZero() {
		t := c.SessionExpiresAt.UTC()
		hb.SessionExpiresAt = &t
	}
	body, err := json.Marshal(hb)
	if err != nil {
		return false, err
	}
	resp, err := cl.Post(ctx, "/api/ingest/heartbeat", body)
	if resp != nil {
		fmt.Printf("%s %d %s\n", time.Now().UTC().Format(time.RFC3339), resp.Status, strings.TrimSpace(string(resp.Body)))
	}
	if err != nil {
		return false, err
	}
	if resp.Status/100 != 2 {
		return false, errors.New("refused")
	}
	return true, nil
}
