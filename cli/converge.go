package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// jobPoll is how often --wait, --watch and reroll read a job: progress is
// a report for people, so a second is prompt enough and costs one small
// read per second.
const jobPoll = time.Second

type adminConvergeCmd struct {
	Box    string `arg:"" help:"Box name or id."`
	Action string `arg:"" enum:"preview,up,refresh,destroy" help:"preview, up, refresh or destroy (required)."`
	Wait   bool   `help:"Follow the job's progress until it ends; exit 1 unless it succeeded."`
	JSON   bool   `help:"Print JSON."`
	// IncludeData and Confirm: destroying the data stack too
	// (docs/operations.md, "Converge").
	IncludeData bool   `name:"include-data" help:"With destroy: destroy the box's data stack (its volume) too. Asks for the phrase 'destroy data BOX'."`
	Confirm     string `help:"The confirmation phrase of --include-data, for use without a terminal: 'destroy data BOX'."`
}

func (*adminConvergeCmd) operation() string { return adminapi.OpRunPulumiConverge }

// Run enqueues the job and, with --wait, follows it. With --include-data
// it asks for the typed phrase first; the daemon judges it (422
// confirmation_mismatch, nothing enqueued).
func (c *adminConvergeCmd) Run(a *adminCmd) error {
	req := adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: c.Box}, Action: c.Action}
	if !c.IncludeData && c.Confirm != "" {
		// The phrase confirms destroying the data: without --include-data
		// it would be dropped and a plain destroy would keep the volume
		// the operator meant to destroy.
		return &exitError{code: ExitUsage, err: errors.New("--confirm goes with --include-data only: nothing was enqueued")}
	}
	if c.IncludeData {
		if c.Action != "destroy" {
			return &exitError{code: ExitUsage, err: errors.New("--include-data goes with destroy only: nothing was enqueued")}
		}
		phrase, err := confirmation(a.env, c.Confirm, adminapi.DestroyDataPhrase(c.Box))
		if err != nil {
			return err
		}
		req.IncludeData, req.Confirmation = true, phrase
	}
	if !c.Wait {
		return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.Job, error) {
			return cl.RunPulumiConverge(ctx, req)
		}, func(w io.Writer, j adminapi.Job) error {
			_, err := fmt.Fprintf(w, "queued job %s: %s %s (follow it: chalupa admin job show %s)\n", j.ID, jobAction(j), j.Box, j.ID)
			return err
		})
	}
	cl, err := a.client()
	if err != nil {
		return err
	}
	in := onInterrupt()
	defer in.stop()
	ctx := in.ctx
	rctx, cancel := context.WithTimeout(ctx, a.Timeout)
	job, err := cl.RunPulumiConverge(rctx, req)
	cancel()
	if err != nil {
		return in.err(apiFailure(err))
	}
	var out io.Writer = a.env.Stdout
	if c.JSON {
		out = io.Discard
	}
	fmt.Fprintf(out, "queued job %s: %s %s\n", job.ID, jobAction(job), job.Box)
	job, err = waitJob(ctx, cl, job.ID, a.Timeout, jobPoll, out)
	if err != nil {
		return in.err(apiFailure(err))
	}
	if c.JSON {
		if err := printJSON(a.env.Stdout, job); err != nil {
			return err
		}
	}
	if job.Status != "succeeded" {
		if !c.JSON {
			// The status line above printed the job's error: once.
			return &exitError{code: 1, err: fmt.Errorf("job %s %s", job.ID, job.Status)}
		}
		return &exitError{code: 1, err: fmt.Errorf("job %s %s: %s", job.ID, job.Status, job.Error)}
	}
	return nil
}

// waitJob polls job id every poll (each read bounded by timeout) until it
// ends or ctx does, printing each new progress report and status change
// to w, and returns the ended job. Errors: ctx's, or the daemon's.
func waitJob(ctx context.Context, cl *adminapi.Client, id string, timeout, poll time.Duration, w io.Writer) (adminapi.Job, error) {
	var seq int64 = -1
	status := ""
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		j, err := cl.GetJob(rctx, id)
		cancel()
		if err != nil {
			return adminapi.Job{}, err
		}
		if j.ProgressSeq != seq && hasJSON(j.Progress) {
			seq = j.ProgressSeq
			fmt.Fprintf(w, "  %s\n", progressLine(j.Progress))
		}
		if j.Status != status {
			status = j.Status
			line := fmt.Sprintf("job %s: %s (attempt %d)", j.ID, j.Status, j.Attempts)
			if j.Error != "" {
				line += ": " + displayText(j.Error)
			}
			fmt.Fprintln(w, line)
		}
		if j.Done() {
			return j, nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return j, ctx.Err()
		case <-t.C:
		}
	}
}

// hasJSON reports whether raw holds a value (not absent, not null).
func hasJSON(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// progressLine renders a progress report (jobs.Progress's JSON) on one
// line: message, step, counts.
func progressLine(raw json.RawMessage) string {
	var p struct {
		Message  string         `json:"message"`
		Resource string         `json:"resource"`
		Op       string         `json:"op"`
		Counts   map[string]int `json:"counts"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return displayText(string(raw))
	}
	var parts []string
	if p.Message != "" {
		parts = append(parts, p.Message)
	}
	if p.Op != "" || p.Resource != "" {
		parts = append(parts, strings.TrimSpace(p.Op+" "+p.Resource))
	}
	if len(p.Counts) > 0 {
		ops := make([]string, 0, len(p.Counts))
		for op := range p.Counts {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		var cs []string
		for _, op := range ops {
			cs = append(cs, fmt.Sprintf("%s %d", op, p.Counts[op]))
		}
		parts = append(parts, "("+strings.Join(cs, ", ")+")")
	}
	return displayText(strings.Join(parts, " · "))
}

type adminStateCmd struct {
	Cancel adminStateCancelCmd `cmd:"" help:"Cancel a box's held state lock (refused while a job of the box is queued or running)."`
	Wipe   adminStateWipeCmd   `cmd:"" help:"Wipe the Pulumi state cache of a box (or of every box); the oracle (chalupa's own record of each box's declared resources) stays and the next up adopts what exists."`
}

type adminStateWipeCmd struct {
	Box     string `arg:"" optional:"" help:"Box name or id (none: every box)."`
	Confirm string `help:"The confirmation phrase, for use without a terminal: 'wipe BOX' (without a box: 'wipe all')."`
	JSON    bool   `help:"Print JSON."`
}

func (*adminStateWipeCmd) operation() string { return adminapi.OpClearPulumiState }

// Run asks for the typed phrase and wipes; the daemon judges the phrase
// (422 confirmation_mismatch), so the rule has one owner.
func (c *adminStateWipeCmd) Run(a *adminCmd) error {
	want := adminapi.WipeAllPhrase
	if c.Box != "" {
		want = adminapi.WipePhrase(c.Box)
	}
	phrase, err := confirmation(a.env, c.Confirm, want)
	if err != nil {
		return err
	}
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.ClearedState, error) {
		return cl.ClearPulumiStateCache(ctx, adminapi.ClearStateRequest{Box: c.Box, Confirmation: phrase})
	}, func(w io.Writer, s adminapi.ClearedState) error {
		_, err := fmt.Fprintf(w, "wiped the state cache of %d box(es): %s; the next up adopts what exists\n", len(s.Boxes), strings.Join(s.Boxes, ", "))
		return err
	})
}

type adminStateCancelCmd struct {
	Box  string `arg:"" help:"Box name or id."`
	JSON bool   `help:"Print JSON."`
}

func (*adminStateCancelCmd) operation() string { return adminapi.OpCancelPulumiState }

// Run cancels the lock.
func (c *adminStateCancelCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.CancelledState, error) {
		return cl.CancelPulumiState(ctx, adminapi.CancelStateRequest{Scope: adminapi.Scope{Kind: "box", ID: c.Box}})
	}, func(w io.Writer, s adminapi.CancelledState) error {
		_, err := fmt.Fprintf(w, "cancelled the held state lock of %s; re-dispatch with: chalupa admin converge %s up\n", s.Box, s.Box)
		return err
	})
}

type adminJobsCmd struct {
	Status string `help:"Only jobs with this status (queued, running, succeeded, failed, cancelled)."`
	Box    string `help:"Only this box's jobs (name or id)."`
	Limit  int64  `help:"Newest N jobs (default 50, at most 500)."`
	Watch  bool   `help:"Print the list again whenever it changes, until interrupted."`
	JSON   bool   `help:"Print JSON."`
}

func (*adminJobsCmd) operation() string { return adminapi.OpListJobs }

// Run lists jobs, once or (--watch) on every change.
func (c *adminJobsCmd) Run(a *adminCmd) error {
	req := adminapi.ListJobsRequest{Status: c.Status, Box: c.Box, Limit: c.Limit}
	list := func(cl *adminapi.Client, ctx context.Context) (adminapi.JobList, error) { return cl.ListJobs(ctx, req) }
	if !c.Watch {
		return runOp(a, c.JSON, list, printJobs)
	}
	cl, err := a.client()
	if err != nil {
		return err
	}
	in := onInterrupt()
	defer in.stop()
	ctx := in.ctx
	last := ""
	for {
		rctx, cancel := context.WithTimeout(ctx, a.Timeout)
		l, err := list(cl, rctx)
		cancel()
		if ctx.Err() != nil {
			return in.err(nil)
		}
		if err != nil {
			return apiFailure(err)
		}
		var b strings.Builder
		if c.JSON {
			err = printJSON(&b, l)
		} else {
			err = printJobs(&b, l)
		}
		if err != nil {
			return err
		}
		if b.String() != last {
			last = b.String()
			fmt.Fprintf(a.env.Stdout, "— %s\n%s", time.Now().UTC().Format(time.RFC3339), last)
		}
		t := time.NewTimer(jobPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return in.err(nil) // Ctrl-C: 130 (docs/operations.md, "Exit codes")
		case <-t.C:
		}
	}
}

// jobAction is a job's action as the CLI prints it: a destroy that also
// destroys the box's data volume says so (docs/operations.md, "Jobs").
func jobAction(j adminapi.Job) string {
	if j.IncludeData {
		return j.Action + " with data"
	}
	return j.Action
}

func printJobs(w io.Writer, l adminapi.JobList) error {
	if !l.Configured {
		fmt.Fprintln(w, "converge is not configured (DIGITALOCEAN_PROVISION_TOKEN): queued jobs do not run")
	}
	tw := table(w)
	fmt.Fprintln(tw, "JOB\tBOX\tACTION\tSTATUS\tATTEMPTS\tCREATED\tFINISHED\tERROR")
	for _, j := range l.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.ID, j.Box, jobAction(j), j.Status, j.Attempts,
			timeOrDash(j.CreatedAt), timeOrDash(j.FinishedAt), displayText(j.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, wk := range l.Workers {
		cur := wk.CurrentJobID
		if cur == "" {
			cur = "none"
		}
		fmt.Fprintf(w, "worker %s (%s): last seen %s, current job %s\n", wk.WorkerID, wk.Version, timeOrDash(wk.LastSeenAt), cur)
	}
	return printRollouts(w, l.Rollouts)
}

type adminJobCmd struct {
	Show   adminJobShowCmd   `cmd:"" help:"Show one job: status, lease, attempts, latest progress, result."`
	Doctor adminJobDoctorCmd `cmd:"" help:"Diagnose one job, read-only: lease, stack locks, pending operations, checkpoints and the provider's resources side by side, with one recommended next action."`
}

type adminJobDoctorCmd struct {
	ID   string `arg:"" help:"Job id."`
	JSON bool   `help:"Print JSON."`
}

func (*adminJobDoctorCmd) operation() string { return adminapi.OpDiagnoseJob }

// Run prints the diagnosis (docs/operations.md, "Job doctor").
func (c *adminJobDoctorCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.JobDiagnosis, error) {
		return cl.DiagnoseJob(ctx, c.ID)
	}, printDiagnosis)
}

// printDiagnosis renders a job diagnosis: the job and its lease, its step
// journal, the ids
// side by side (box, stacks, provider), each stack's lock, pending
// operations and checkpoint, and the recommendation with its commands.
func printDiagnosis(w io.Writer, d adminapi.JobDiagnosis) error {
	j := d.Job
	tw := table(w)
	fmt.Fprintf(tw, "job\t%s (%s %s)\n", j.ID, j.Action, j.Box)
	fmt.Fprintf(tw, "status\t%s, attempt %d of %d\n", j.Status, j.Attempts, d.Lease.MaxAttempts)
	switch {
	case d.Lease.Holder == "":
		fmt.Fprintf(tw, "lease\tnone\n")
	default:
		holder := "a process that is gone"
		if d.Lease.HolderIsThisDaemon {
			holder = "this daemon"
		}
		exp := "expires"
		if d.Lease.Expired {
			exp = "expired"
		}
		fmt.Fprintf(tw, "lease\t%s (%s), held %ds, %s %s\n", d.Lease.Holder, holder, d.Lease.AgeSeconds, exp, timeOrDash(d.Lease.ExpiresAt))
	}
	lane := "running"
	if d.Lease.LanePaused {
		lane = "paused"
	}
	fmt.Fprintf(tw, "job lane\t%s\n", lane)
	if hasJSON(j.Progress) {
		fmt.Fprintf(tw, "latest report (#%d)\t%s\n", j.ProgressSeq, progressLine(j.Progress))
	}
	if j.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", displayText(j.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Steps) > 0 {
		fmt.Fprintln(w)
		tw = table(w)
		fmt.Fprintln(tw, "STEP\tAT\tATTEMPT\tWORKER\tKIND\tSTATUS\tDETAIL")
		for _, s := range d.Steps {
			detail := displayText(s.Reason)
			if n := strings.Count(s.Reason, "\n"); n > 0 {
				// A failed run's whole output: the error above is what
				// matters; --json has the rest.
				detail = fmt.Sprintf("the run's output, %d lines (--json shows it)", n+1)
			}
			if hasJSON(s.Progress) {
				detail = progressLine(s.Progress)
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", s.Seq, timeOrDash(s.At), s.Attempt, orElse(s.Worker, "-"), s.Kind, s.Status, orElse(detail, "-"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	tw = table(w)
	provider, none := "PROVIDER ("+d.Provider.Tag+")", "-"
	if d.Provider.Unavailable {
		provider, none = "PROVIDER ("+d.Provider.Tag+": unavailable, "+d.Provider.ErrorKind+")", "?"
	}
	state, noState := "STACK STATE", "-"
	var st adminapi.ProviderIDs
	for _, s := range d.Stacks {
		if s.Unavailable {
			state, noState = "STACK STATE ("+s.Stack+": unavailable, "+s.ErrorKind+")", "?"
		}
		st.DropletID = orElse(st.DropletID, s.State.DropletID)
		st.FirewallID = orElse(st.FirewallID, s.State.FirewallID)
		st.VolumeID = orElse(st.VolumeID, s.State.VolumeID)
	}
	fmt.Fprintln(tw, "RESOURCE\tBOX RECORDS\t"+state+"\t"+provider)
	for _, row := range []struct {
		kind, box, state string
		at               []adminapi.ProviderResource
	}{
		{"droplet", d.Recorded.DropletID, st.DropletID, d.Provider.Droplets},
		{"volume", d.Recorded.VolumeID, st.VolumeID, d.Provider.Volumes},
		{"firewall", d.Recorded.FirewallID, st.FirewallID, d.Provider.Firewalls},
	} {
		ids := make([]string, 0, len(row.at))
		for _, r := range row.at {
			ids = append(ids, strings.TrimSpace(r.ID+" "+r.Status))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row.kind, orElse(row.box, "-"), orElse(row.state, noState), orElse(strings.Join(ids, ", "), none))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = table(w)
	fmt.Fprintln(tw, "STACK\tEXISTS\tLOCK\tPENDING\tCHECKPOINT")
	for _, s := range d.Stacks {
		lock, exists, noPending := "none", strconv.FormatBool(s.Exists), "none"
		switch {
		case s.Unavailable && s.LocksUnknown:
			lock = "?"
		case s.LocksUnknown:
			lock = "unknown (not a file:// backend)"
		}
		if s.Unavailable {
			exists, noPending = "unavailable, "+s.ErrorKind, "?"
		}
		var locks []string
		for _, l := range s.Locks {
			alive := "holder gone"
			if l.HolderAlive {
				alive = "holder alive"
			}
			locks = append(locks, fmt.Sprintf("pid %d on %s, %ds old, %s", l.PID, l.Hostname, l.AgeSeconds, alive))
		}
		if len(locks) > 0 {
			lock = strings.Join(locks, "; ")
		}
		pending := make([]string, 0, len(s.Pending))
		for _, p := range s.Pending {
			pending = append(pending, strings.TrimSpace(p.Kind+" "+p.Name+" "+p.ID))
		}
		cp := "none"
		if s.CheckpointVersion > 0 {
			cp = fmt.Sprintf("v%d at %s", s.CheckpointVersion, timeOrDash(s.CheckpointAt))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Stack, exists, lock, orElse(strings.Join(pending, ", "), noPending), cp)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	r := d.Recommendation
	fmt.Fprintf(w, "\nsymptom: %s\nrecommended: %s — %s\n", r.Symptom, r.Action, r.Reason)
	for _, c := range r.Commands {
		fmt.Fprintf(w, "  %s\n", c)
	}
	return nil
}

// orElse is s, or def when s is empty.
func orElse(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

type adminJobShowCmd struct {
	ID   string `arg:"" help:"Job id."`
	JSON bool   `help:"Print JSON."`
}

func (*adminJobShowCmd) operation() string { return adminapi.OpGetJob }

// Run shows the job.
func (c *adminJobShowCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.Job, error) {
		return cl.GetJob(ctx, c.ID)
	}, func(w io.Writer, j adminapi.Job) error {
		tw := table(w)
		fmt.Fprintf(tw, "job\t%s\n", j.ID)
		fmt.Fprintf(tw, "box\t%s (%s)\n", j.Box, j.Scope.ID)
		fmt.Fprintf(tw, "action\t%s\n", jobAction(j))
		fmt.Fprintf(tw, "status\t%s\n", j.Status)
		fmt.Fprintf(tw, "attempts\t%d\n", j.Attempts)
		if j.LockedBy != "" {
			fmt.Fprintf(tw, "locked by\t%s since %s\n", j.LockedBy, timeOrDash(j.LockedAt))
		}
		fmt.Fprintf(tw, "created / started / finished\t%s / %s / %s\n", timeOrDash(j.CreatedAt), timeOrDash(j.StartedAt), timeOrDash(j.FinishedAt))
		if hasJSON(j.Progress) {
			fmt.Fprintf(tw, "progress\t%s\n", progressLine(j.Progress))
		}
		if hasJSON(j.Result) {
			fmt.Fprintf(tw, "result\t%s\n", displayText(string(j.Result)))
		}
		if j.Error != "" {
			fmt.Fprintf(tw, "error\t%s\n", displayText(j.Error))
		}
		return tw.Flush()
	})
}

// adminRerollCmd is the fleet reroll: one job per box, in order, each
// waited for. It calls several operations, so it is not an opCommand.
type adminRerollCmd struct {
	Env       string `name:"env" xor:"scope" required:"" help:"Reroll this environment's boxes."`
	All       bool   `name:"all" xor:"scope" required:"" help:"Reroll every box."`
	Action    string `required:"" enum:"preview,up,refresh,destroy,upgrade-agent" help:"preview, up, refresh, destroy, or upgrade-agent (a rollout in the daemon: one box, then batches; stops at the first box whose agent does not report) (required)."`
	KeepGoing bool   `name:"keep-going" help:"Go on after a failed job (default: stop at the first failure; not with upgrade-agent, which always stops)."`
	Batch     int    `name:"batch" default:"5" help:"upgrade-agent: boxes upgraded at once after the first (1-50)."`
	JSON      bool   `help:"Print the summary as JSON."`
}

// rerollRow is one line of the reroll summary.
type rerollRow struct {
	Box    string `json:"box"`
	JobID  string `json:"jobId"`
	Status string `json:"status"`
	Error  string `json:"error"`
}

// Run rerolls; upgrade-agent starts a rollout in the daemon and follows it
// (rollout).
func (c *adminRerollCmd) Run(a *adminCmd) error {
	if c.Action == rerollUpgradeAgent {
		return c.rollout(a)
	}
	cl, err := a.client()
	if err != nil {
		return err
	}
	in := onInterrupt()
	defer in.stop()
	ctx := in.ctx
	var out io.Writer = a.env.Stdout
	if c.JSON {
		out = io.Discard
	}
	rows, err := reroll(ctx, cl, c.Env, c.Action, c.KeepGoing, a.Timeout, jobPoll, out)
	if err != nil {
		return in.err(apiFailure(err))
	}
	if c.JSON {
		if err := printJSON(a.env.Stdout, rows); err != nil {
			return err
		}
	} else if err := printReroll(a.env.Stdout, rows); err != nil {
		return err
	}
	// A skipped box is not a failure: either it had nothing to do, or a
	// failed box before it stopped the reroll (and fails it).
	for _, r := range rows {
		if r.Status != "succeeded" && r.Status != "skipped" {
			return &exitError{code: 1, err: errors.New("reroll: not every box succeeded")}
		}
	}
	return nil
}

// rerollUpgradeAgent is reroll's action that starts an agent rollout in
// the daemon (adminStartAgentRollout) instead of enqueuing converge jobs.
const rerollUpgradeAgent = "upgrade-agent"

// reroll runs action on every box of env ("" for all), in the order the
// daemon lists them (environment, then name), waiting for each job, and
// returns one row per box: stopped at the first box that did not succeed
// unless keepGoing (the boxes not reached are listed "skipped"). Errors:
// listing the boxes failed, or ctx ended.
func reroll(ctx context.Context, cl *adminapi.Client, env, action string, keepGoing bool, timeout, poll time.Duration, w io.Writer) ([]rerollRow, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	list, err := cl.ListBoxes(rctx, adminapi.ListBoxesRequest{Environment: env})
	cancel()
	if err != nil {
		return nil, err
	}
	rows := make([]rerollRow, 0, len(list.Boxes))
	stopped := false
	for _, b := range list.Boxes {
		if stopped {
			rows = append(rows, rerollRow{Box: b.Name, Status: "skipped"})
			continue
		}
		row := rerollRow{Box: b.Name}
		var ae *adminapi.APIError
		rctx, cancel := context.WithTimeout(ctx, timeout)
		job, err := cl.RunPulumiConverge(rctx, adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: b.ID}, Action: action})
		cancel()
		switch {
		case errors.As(err, &ae):
			// Refused (a busy box, converge not configured): this box
			// failed; the daemon's code says why.
			row.Status, row.JobID, row.Error = "refused", ae.JobID, ae.Code+": "+ae.Message
		case err != nil:
			return rows, err
		default:
			fmt.Fprintf(w, "%s: queued job %s\n", b.Name, job.ID)
			row.JobID = job.ID
			job, err = waitJob(ctx, cl, job.ID, timeout, poll, w)
			if err != nil {
				return rows, err
			}
			row.Status, row.Error = job.Status, job.Error
		}
		rows = append(rows, row)
		if row.Status != "succeeded" && !keepGoing {
			stopped = true
		}
	}
	return rows, nil
}

func printReroll(w io.Writer, rows []rerollRow) error {
	tw := table(w)
	fmt.Fprintln(tw, "BOX\tJOB\tSTATUS\tERROR")
	for _, r := range rows {
		job := r.JobID
		if job == "" {
			job = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Box, job, r.Status, displayText(r.Error))
	}
	return tw.Flush()
}
