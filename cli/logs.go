package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// adminLogsCmd lists a deployment's log sessions and chunks (the
// default), fetches chunks through short-lived grants, and erases an
// environment's logs (docs/operations.md, "Logs").
type adminLogsCmd struct {
	List  adminLogsListCmd  `cmd:"" default:"withargs" help:"List a deployment's log sessions and chunks (the default)."`
	Get   adminLogsGetCmd   `cmd:"" help:"Write a deployment's committed chunks to stdout (or --out) through short-lived grants; --follow waits for new ones."`
	Chunk adminLogsChunkCmd `cmd:"" help:"Show one chunk's metadata (state, size, SHA-256, times)."`
	Erase adminLogsEraseCmd `cmd:"" help:"Erase an environment's logs: every chunk's object, then its rows."`
	Allow adminLogsAllowCmd `cmd:"" help:"Replace an environment's log service allowlist (--reset: the default list)."`
}

type adminLogsListCmd struct {
	Env        string `arg:"" name:"slug" help:"Environment slug."`
	Deployment string `arg:"" name:"deployment" help:"Deployment id."`
	Service    string `help:"Only this service's sessions."`
	Session    string `help:"Only this session."`
	JSON       bool   `help:"Print JSON."`
}

func (*adminLogsListCmd) operation() string { return adminapi.OpListLogs }

// Run prints the sessions and their chunks.
func (c *adminLogsListCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.LogListing, error) {
		return cl.ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: c.Env, DeploymentID: c.Deployment, Service: c.Service, Session: c.Session})
	}, func(w io.Writer, l adminapi.LogListing) error {
		fmt.Fprintf(w, "%s/%s: %d of %d chunks, %d of %d bytes planned\n", l.EnvironmentSlug, l.DeploymentID, l.ChunksPlanned, l.MaxChunks, l.BytesPlanned, l.MaxBytes)
		if len(l.Sessions) == 0 {
			fmt.Fprintln(w, "no log sessions")
			return nil
		}
		tw := table(w)
		fmt.Fprintln(tw, "SESSION\tSERVICE\tOPENED\tEXPIRES\tFINISHED\tCOMMITTED\tPLANNED\tBYTES")
		for _, s := range l.Sessions {
			var committed, planned, size int64
			for _, ch := range s.Chunks {
				if ch.State == "committed" {
					committed++
					size += ch.SizeBytes
				} else {
					planned++
				}
			}
			fin := "-"
			if s.FinishedAt != nil {
				fin = timeOrDash(*s.FinishedAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", s.SessionID, s.Service, timeOrDash(s.OpenedAt), timeOrDash(s.ExpiresAt), fin, committed, planned, size)
		}
		return tw.Flush()
	})
}

type adminLogsChunkCmd struct {
	Env        string `arg:"" name:"slug" help:"Environment slug."`
	Deployment string `arg:"" name:"deployment" help:"Deployment id."`
	Session    string `arg:"" name:"session" help:"Session id."`
	Seq        int64  `arg:"" name:"seq" help:"Sequence number (0 is the first)."`
	JSON       bool   `help:"Print JSON."`
}

func (*adminLogsChunkCmd) operation() string { return adminapi.OpGetLogChunk }

// Run prints one chunk's metadata.
func (c *adminLogsChunkCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.LogChunkInfo, error) {
		return cl.GetLogChunk(ctx, adminapi.LogChunkRequest{EnvironmentSlug: c.Env, DeploymentID: c.Deployment, Session: c.Session, Seq: strconv.FormatInt(c.Seq, 10)})
	}, func(w io.Writer, ch adminapi.LogChunkInfo) error {
		committed := "-"
		if ch.CommittedAt != nil {
			committed = timeOrDash(*ch.CommittedAt)
		}
		fmt.Fprintf(w, "%s/%s %s (%s) seq %d: %s, %d bytes, sha256 %s, planned %s, committed %s\n", ch.EnvironmentSlug, ch.DeploymentID,
			ch.SessionID, ch.Service, ch.Seq, ch.State, ch.SizeBytes, ch.SHA256, timeOrDash(ch.PlannedAt), committed)
		return nil
	})
}

// followInterval is how often `logs get --follow` asks for new chunks:
// an agent commits a chunk every few seconds at most.
const followInterval = 5 * time.Second

type adminLogsGetCmd struct {
	Env        string `arg:"" name:"slug" help:"Environment slug."`
	Deployment string `arg:"" name:"deployment" help:"Deployment id."`
	Service    string `help:"Only this service's sessions."`
	Session    string `help:"Only this session."`
	Follow     bool   `help:"Keep waiting for new chunks until interrupted or every listed session is finished."`
	Out        string `help:"Write to this file instead of stdout."`
}

func (*adminLogsGetCmd) operation() string { return adminapi.OpGetLogDownload }

// Run writes each committed chunk, in session and sequence order, fetched
// from the object store with a grant the daemon signs: the bytes never
// pass through chalupa. Each chunk's SHA-256 is checked against its plan.
// Chunks are written as stored (compressed by the agent).
func (c *adminLogsGetCmd) Run(a *adminCmd) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	out := io.Writer(a.env.Stdout)
	if c.Out != "" {
		f, err := os.OpenFile(c.Out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return &exitError{code: 1, err: err}
		}
		defer f.Close()
		out = f
	}
	return c.get(cl, &http.Client{Timeout: a.Timeout}, a.Timeout, followInterval, out)
}

// get writes the committed chunks not yet written to out and, with
// --follow, asks again every interval until every listed session is
// finished. timeout bounds each request.
func (c *adminLogsGetCmd) get(cl *adminapi.Client, hc *http.Client, timeout, interval time.Duration, out io.Writer) error {
	done := map[string]bool{} // session/seq written
	for {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		l, err := cl.ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: c.Env, DeploymentID: c.Deployment, Service: c.Service, Session: c.Session})
		cancel()
		if err != nil {
			return apiFailure(err)
		}
		open := false
		for _, s := range l.Sessions {
			open = open || s.FinishedAt == nil
			for _, ch := range s.Chunks {
				id := fmt.Sprintf("%s/%d", s.SessionID, ch.Seq)
				if ch.State != "committed" || done[id] {
					continue
				}
				if err := c.fetch(cl, hc, timeout, s.SessionID, ch, out); err != nil {
					return err
				}
				done[id] = true
			}
		}
		if !c.Follow || (!open && len(l.Sessions) > 0) {
			return nil
		}
		time.Sleep(interval)
	}
}

// fetch asks for one chunk's grant and copies the chunk to out.
func (c *adminLogsGetCmd) fetch(cl *adminapi.Client, hc *http.Client, timeout time.Duration, session string, ch adminapi.LogChunk, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d, err := cl.GetLogDownload(ctx, adminapi.LogDownloadRequest{EnvironmentSlug: c.Env, DeploymentID: c.Deployment, Session: session, Seq: strconv.FormatInt(ch.Seq, 10)})
	if err != nil {
		return apiFailure(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.URL, nil)
	if err != nil {
		return &exitError{code: 1, err: errors.New("the daemon's grant is not a URL")}
	}
	resp, err := hc.Do(req)
	if err != nil {
		// The URL is a credential until it expires: not printed.
		return &exitError{code: 1, err: fmt.Errorf("chunk %s/%d: object store unreachable", session, ch.Seq)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &exitError{code: 1, err: fmt.Errorf("chunk %s/%d: object store answered %d", session, ch.Seq, resp.StatusCode)}
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(resp.Body, d.SizeBytes+1)); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("chunk %s/%d: %v", session, ch.Seq, err)}
	}
	sum := sha256.Sum256(buf.Bytes())
	if hex.EncodeToString(sum[:]) != d.SHA256 {
		return &exitError{code: 1, err: fmt.Errorf("chunk %s/%d: the stored object does not match its plan's sha256", session, ch.Seq)}
	}
	_, err = out.Write(buf.Bytes())
	return err
}

type adminLogsEraseCmd struct {
	Env     string `arg:"" name:"slug" help:"Environment slug."`
	Confirm string `help:"The confirmation phrase, for use without a terminal: 'erase logs SLUG'."`
	JSON    bool   `help:"Print JSON."`
}

func (*adminLogsEraseCmd) operation() string { return adminapi.OpEraseLogs }

// Run erases the environment's logs and prints the receipt.
func (c *adminLogsEraseCmd) Run(a *adminCmd) error {
	phrase, err := confirmation(a.env, c.Confirm, adminapi.EraseLogsPhrase(c.Env))
	if err != nil {
		return err
	}
	// The daemon judges the phrase (422 confirmation_mismatch).
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.LogErasure, error) {
		return cl.EraseLogs(ctx, adminapi.EraseLogsRequest{EnvironmentSlug: c.Env, Confirmation: phrase})
	}, func(w io.Writer, r adminapi.LogErasure) error {
		resumed := ""
		if r.Resumed {
			resumed = " (resumed an interrupted erasure)"
		}
		fmt.Fprintf(w, "erased the logs of %s%s: %d chunks (objects and rows), %d sessions; erasure %s\n",
			r.EnvironmentSlug, resumed, r.ChunksRemoved, r.SessionsRemoved, r.ErasureID)
		if r.RemainingChunks > 0 || r.RemainingSessions > 0 {
			fmt.Fprintf(w, "agents wrote during the erase: %d chunks, %d sessions remain\n", r.RemainingChunks, r.RemainingSessions)
		}
		return nil
	})
}

type adminLogsAllowCmd struct {
	Env      string   `arg:"" name:"slug" help:"Environment slug."`
	Services []string `arg:"" optional:"" name:"service" help:"Unit names or file labels agents may ship logs for (the whole list)."`
	Reset    bool     `help:"Restore the default list (chalupa-agent.service, cloud-init.service, cloud-final.service)."`
	JSON     bool     `help:"Print JSON."`
}

func (*adminLogsAllowCmd) operation() string { return adminapi.OpSetLogServices }

// Run replaces the allowlist and prints the list now in force. Names or
// --reset, not both: a usage mistake exits 2 before anything is sent.
func (c *adminLogsAllowCmd) Run(a *adminCmd) error {
	if c.Reset == (len(c.Services) > 0) {
		return &exitError{code: ExitUsage, err: errors.New("give the services to allow, or --reset for the default list")}
	}
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.LogServices, error) {
		return cl.SetLogServices(ctx, adminapi.SetLogServicesRequest{EnvironmentSlug: c.Env, Services: c.Services, Reset: c.Reset})
	}, func(w io.Writer, l adminapi.LogServices) error {
		which := "its own list"
		if l.Default {
			which = "the default list"
		}
		fmt.Fprintf(w, "%s may ship logs for %s: %s\n", l.EnvironmentSlug, which, strings.Join(l.Services, " "))
		return nil
	})
}
