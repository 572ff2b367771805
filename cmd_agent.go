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
)

type agentCmd struct {
	Heartbeat agentHeartbeatCmd `cmd:"" help:"Send signed heartbeats (the reference agent)."`
}

type agentHeartbeatCmd struct {
	URL              string        `required:"" help:"Daemon origin, e.g. https://chalupa.example.com."`
	KeyID            string        `name:"key-id" required:"" help:"Ingest key id (the key-id file written by 'admin keys issue --out')."`
	KeyFile          string        `name:"key-file" required:"" type:"existingfile" help:"File holding the key material (ingest.key)."`
	Env              string        `required:"" help:"Environment slug the key is bound to."`
	Deployment       string        `required:"" help:"Deployment id (one droplet's life)."`
	DropletID        int64         `name:"droplet-id" help:"DigitalOcean droplet id."`
	Region           string        `help:"Droplet region slug."`
	Size             string        `help:"Droplet size slug."`
	LimitMinutes     int64         `name:"limit-minutes" default:"30" help:"Idle limit in minutes."`
	ActivityFile     string        `name:"activity-file" help:"File whose modification time is the last user activity (default: agent start time)."`
	CIActive         bool          `name:"ci-active" help:"Report a live CI suite (defers idle shutdown)."`
	SessionExpiresAt time.Time     `name:"session-expires-at" help:"Absolute session expiry (RFC 3339)." format:"2006-01-02T15:04:05Z07:00"`
	Every            time.Duration `help:"Send every interval until interrupted (0: send once)." default:"0s"`
	Count            int           `help:"Stop after this many heartbeats (0: no limit)."`
	Retries          int           `default:"3" help:"Retries of a 5xx answer, each with a fresh nonce."`
}

// Run sends heartbeats and prints each answer's status. It exits non-zero
// when the last answer was not 2xx.
func (c *agentHeartbeatCmd) Run() error {
	if err := checkOriginURL("--url", "fleet heartbeats", c.URL); err != nil {
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
	cl := &signer.Client{BaseURL: c.URL, KeyID: strings.TrimSpace(c.KeyID), Key: key, Retries: c.Retries}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	started := time.Now().UTC()
	sent, ok := 0, false
	for {
		ok, err = c.send(ctx, cl, started)
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

func (c *agentHeartbeatCmd) send(ctx context.Context, cl *signer.Client, started time.Time) (bool, error) {
	last := started
	if c.ActivityFile != "" {
		if fi, err := os.Stat(c.ActivityFile); err == nil {
			last = fi.ModTime().UTC()
		}
	}
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

type rewrapCmd struct{}

// Run re-encrypts every envelope from CHALUPA_INGEST_MASTER_KEY to
// CHALUPA_INGEST_MASTER_KEY_NEW with the daemon stopped.
func (rewrapCmd) Run() error {
	cfg, err := daemon.LoadConfig(os.LookupEnv)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	newKey := strings.TrimSpace(os.Getenv("CHALUPA_INGEST_MASTER_KEY_NEW"))
	if newKey == "" {
		return &exitError{code: 1, err: errors.New("CHALUPA_INGEST_MASTER_KEY_NEW is required (the new master key, base64 of 32 bytes)")}
	}
	rep, err := daemon.RunRewrap(context.Background(), cfg, newKey, nil)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	if rep.AlreadyDone {
		fmt.Printf("the database is already sealed under the new key (master key version %d): an earlier rewrap committed before it was stopped\n", rep.ToVersion)
	} else {
		fmt.Printf("rewrapped %d ingest key envelopes: master key version %d -> %d (replicated)\n", rep.Keys, rep.FromVersion, rep.ToVersion)
	}
	if rep.SecretsFileUpdated {
		fmt.Printf("the new key is now in %s\n", rep.SecretsFile)
	} else {
		fmt.Println("set CHALUPA_INGEST_MASTER_KEY to the value of CHALUPA_INGEST_MASTER_KEY_NEW before the next serve")
	}
	return nil
}
