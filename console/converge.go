package console

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/storage"
)

// Converge page bounds (docs/operations.md, "Console").
const (
	// oracleBoxesLimit is how many boxes the oracle's cache tab lists.
	oracleBoxesLimit = 200
	// oracleJobsLimit is how many recent jobs it lists.
	oracleJobsLimit = 20
	// boxJobsLimit is how many of a box's jobs its Pulumi settings list.
	boxJobsLimit = 20
	// checkpointsPerStack is how many checkpoint versions of each stack a
	// box page lists (the oracle tab shows the newest only).
	checkpointsPerStack = 5
	// jobRefreshSeconds is how often a live job's page reloads itself
	// (a meta refresh: no script).
	jobRefreshSeconds = 3
)

// stackNames are a box's two Pulumi stacks, <name>-compute and <name>-data
// (docs/operations.md, "Converge").
func stackNames(box string) []string { return []string{box + "-compute", box + "-data"} }

// lockView states a box's lock as the job queue records it: the engine's
// own lock is not read by the console, and the page says so.
type lockView struct {
	// Held is true while a job of the box runs (it holds the stacks'
	// lock); LiveJob is the queued or running job ("" when none).
	Held    bool
	LiveJob *storage.Job
}

// stackView is one stack with its newest checkpoints.
type stackView struct {
	Name        string
	Checkpoints []storage.StackCheckpoint
	// ImportPending is the checkpoint version whose import into the stack
	// is unfinished (0: none).
	ImportPending int64
}

// jobRow is a job with its box and its latest progress decoded.
type jobRow struct {
	storage.Job
	Box      string
	Progress jobs.Progress
}

func toJobRow(j storage.Job, box string) jobRow {
	r := jobRow{Job: j, Box: box}
	if len(j.Progress) > 0 {
		// A progress report that does not decode shows as none.
		_ = json.Unmarshal(j.Progress, &r.Progress)
	}
	return r
}

// boxRow is one box on the oracle's cache tab.
type boxRow struct {
	Box     storage.Box
	Stacks  []stackView
	Lock    lockView
	LastJob *jobRow
}

type oracleView struct {
	Tab        string
	Configured bool
	Boxes      []boxRow
	Jobs       []jobRow
	Limit      int
}

// configured reports whether converge can run jobs.
func (c *Console) configured() bool { return c.d.Jobs != nil && c.d.Jobs.Configured() }

// stacksOf reads a box's stacks: their newest perStack checkpoints and any
// pending import.
func (c *Console) stacksOf(r *http.Request, box string, perStack int, markers map[string]int64) ([]stackView, error) {
	names := stackNames(box)
	cps, err := storage.StackCheckpoints(r.Context(), c.d.DB.Read, names, perStack)
	if err != nil {
		return nil, err
	}
	out := make([]stackView, 0, len(names))
	for _, n := range names {
		sv := stackView{Name: n, ImportPending: markers[n]}
		for _, cp := range cps {
			if cp.Stack == n {
				sv.Checkpoints = append(sv.Checkpoints, cp)
			}
		}
		out = append(out, sv)
	}
	return out, nil
}

// lockOf reads the box's live job.
func (c *Console) lockOf(r *http.Request, boxID string) (lockView, error) {
	j, err := storage.LiveJob(r.Context(), c.d.DB.Read, jobs.ScopeBox, boxID)
	if errors.Is(err, storage.ErrNotFound) {
		return lockView{}, nil
	}
	if err != nil {
		return lockView{}, err
	}
	return lockView{Held: j.Status == storage.JobRunning, LiveJob: &j}, nil
}

// oracle is /app/oracle?tab=cache: every box with its stacks' newest
// checkpoint, its lock and its last job; then the recent jobs.
func (c *Console) oracle(w http.ResponseWriter, r *http.Request) {
	tab := r.URL.Query().Get("tab")
	if tab == "" {
		tab = "cache"
	}
	if tab != "cache" {
		c.notFound(w, r, "oracle tab")
		return
	}
	ctx := r.Context()
	boxes, err := storage.ListBoxes(ctx, c.d.DB.Read, "")
	if err != nil {
		c.internal(w, r, err)
		return
	}
	markers, err := storage.ListStackImportMarkers(ctx, c.d.DB.Read)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	v := oracleView{Tab: tab, Configured: c.configured(), Limit: oracleBoxesLimit}
	names := map[string]string{}
	for _, b := range boxes {
		names[b.ID] = b.Name
	}
	for i, b := range boxes {
		if i == oracleBoxesLimit {
			break
		}
		row := boxRow{Box: b}
		if row.Stacks, err = c.stacksOf(r, b.Name, 1, markers); err != nil {
			c.internal(w, r, err)
			return
		}
		if row.Lock, err = c.lockOf(r, b.ID); err != nil {
			c.internal(w, r, err)
			return
		}
		last, err := storage.ListJobs(ctx, c.d.DB.Read, storage.JobFilter{ScopeID: b.ID, Limit: 1})
		if err != nil {
			c.internal(w, r, err)
			return
		}
		if len(last) == 1 {
			jr := toJobRow(last[0], b.Name)
			row.LastJob = &jr
		}
		v.Boxes = append(v.Boxes, row)
	}
	recent, err := storage.ListJobs(ctx, c.d.DB.Read, storage.JobFilter{Limit: oracleJobsLimit})
	if err != nil {
		c.internal(w, r, err)
		return
	}
	for _, j := range recent {
		v.Jobs = append(v.Jobs, toJobRow(j, names[j.ScopeID]))
	}
	c.render(w, r, http.StatusOK, "oracle", v)
}

type boxView struct {
	Box        storage.Box
	Configured bool
	Stacks     []stackView
	Lock       lockView
	Jobs       []jobRow
	Actions    []string
	// DestroyPhrase is the typed confirmation a destroy needs;
	// DestroyDataPhrase the one a destroy that includes the data volume
	// needs too.
	DestroyPhrase, DestroyDataPhrase string
	// Error is a refused converge request's explanation (fixed text).
	Error string
	// Busy links the live job that refused a request.
	Busy string
	// CSRF is the session's token for the forms.
	CSRF string
	// ChangedSinceLaunch is set when the configuration changed after the
	// recorded droplet launched: that droplet keeps the agent it booted
	// with (docs/operations.md, "Boxes").
	ChangedSinceLaunch bool
}

// boxByName answers the box route parameter names, or a 404 page.
func (c *Console) boxByName(w http.ResponseWriter, r *http.Request) (storage.Box, bool) {
	name := param(r, "name")
	b, err := storage.BoxByRef(r.Context(), c.d.DB.Read, name)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && b.Name != name) {
		c.notFound(w, r, "box")
		return storage.Box{}, false
	}
	if err != nil {
		c.internal(w, r, err)
		return storage.Box{}, false
	}
	return b, true
}

// boxPage renders a box's Settings → Pulumi with status and, for a
// refused converge request, its explanation.
func (c *Console) boxPage(w http.ResponseWriter, r *http.Request, b storage.Box, status int, errMsg, busy string) {
	ctx := r.Context()
	markers, err := storage.ListStackImportMarkers(ctx, c.d.DB.Read)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	v := boxView{Box: b, Configured: c.configured(), Actions: jobs.Actions, Error: errMsg, Busy: busy, CSRF: sessionOf(r).CSRFToken,
		DestroyPhrase: adminapi.ConvergePhrase(jobs.ActionDestroy, b.Name), DestroyDataPhrase: adminapi.DestroyDataPhrase(b.Name),
		ChangedSinceLaunch: b.Resources.DropletID != 0 && b.Config.UpdatedAt.After(b.Launch.LaunchedAt)}
	if v.Stacks, err = c.stacksOf(r, b.Name, checkpointsPerStack, markers); err != nil {
		c.internal(w, r, err)
		return
	}
	if v.Lock, err = c.lockOf(r, b.ID); err != nil {
		c.internal(w, r, err)
		return
	}
	list, err := storage.ListJobs(ctx, c.d.DB.Read, storage.JobFilter{ScopeID: b.ID, Limit: boxJobsLimit})
	if err != nil {
		c.internal(w, r, err)
		return
	}
	for _, j := range list {
		v.Jobs = append(v.Jobs, toJobRow(j, b.Name))
	}
	c.render(w, r, status, "box", v)
}

// box is /app/boxes/:name: the box's Settings → Pulumi.
func (c *Console) box(w http.ResponseWriter, r *http.Request) {
	b, ok := c.boxByName(w, r)
	if !ok {
		return
	}
	c.boxPage(w, r, b, http.StatusOK, "", "")
}

// converge is POST /app/boxes/:name/converge: it enqueues the form's
// action through the job service the admin API uses
// (adminRunPulumiConverge's path, not its HTTP API). A destroy needs the
// typed confirmation adminapi.ConvergePhrase; a destroy with "include
// data" ticked also adminapi.DestroyDataPhrase in data_confirmation, and
// a data_confirmation without "include data" is refused
// (docs/operations.md, "Converge"). Every refusal writes
// nothing: a foreign form 403, a wrong phrase or action 422, no executor
// 503, a busy scope 409; success redirects to the job's page.
func (c *Console) converge(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	s := sessionOf(r)
	if err := r.ParseForm(); err != nil || !c.sameOrigin(r) || !tokenEqual(s.CSRFToken, r.PostForm.Get(csrfField)) {
		c.fail(w, r, http.StatusForbidden, "Refused", "This form was not sent from this console. Reload the page and try again.")
		return
	}
	b, ok := c.boxByName(w, r)
	if !ok {
		return
	}
	action := r.PostForm.Get("action")
	if !jobs.ValidAction(action) {
		c.boxPage(w, r, b, http.StatusUnprocessableEntity, "Unknown action: choose preview, up, refresh or destroy. Nothing was enqueued.", "")
		return
	}
	if action == jobs.ActionDestroy && r.PostForm.Get("confirmation") != adminapi.ConvergePhrase(action, b.Name) {
		c.boxPage(w, r, b, http.StatusUnprocessableEntity,
			"The confirmation did not match: type exactly “"+adminapi.ConvergePhrase(action, b.Name)+"” to destroy. Nothing was enqueued.", "")
		return
	}
	includeData := action == jobs.ActionDestroy && r.PostForm.Get("include_data") != ""
	if action == jobs.ActionDestroy && !includeData && r.PostForm.Get("data_confirmation") != "" {
		// A typed data phrase says the operator means to destroy the
		// volume: a plain destroy would keep it.
		c.boxPage(w, r, b, http.StatusUnprocessableEntity,
			"A data confirmation was typed but “include data” is not ticked: tick it to destroy the volume too, or clear the data phrase to keep it. Nothing was enqueued.", "")
		return
	}
	if includeData && r.PostForm.Get("data_confirmation") != adminapi.DestroyDataPhrase(b.Name) {
		c.boxPage(w, r, b, http.StatusUnprocessableEntity,
			"The data confirmation did not match: type exactly “"+adminapi.DestroyDataPhrase(b.Name)+"” to destroy the volume too. Nothing was enqueued.", "")
		return
	}
	if c.d.Jobs == nil {
		c.boxPage(w, r, b, http.StatusServiceUnavailable, jobs.ErrNotConfigured.Error()+". Nothing was enqueued.", "")
		return
	}
	job, err := c.d.Jobs.EnqueueRequest(r.Context(), jobs.Request{ScopeKind: jobs.ScopeBox, Ref: b.ID, Action: action,
		IncludeData: includeData, Confirmation: r.PostForm.Get("data_confirmation")})
	var busy *storage.ScopeBusyError
	var admit *jobs.AdmitError
	switch {
	case err == nil:
		http.Redirect(w, r, "/app/jobs/"+job.ID, http.StatusSeeOther)
	case errors.As(err, &admit):
		// The refusal names configuration variables, never values
		// (docs/operations.md, "Converge").
		c.boxPage(w, r, b, http.StatusUnprocessableEntity, admit.Message+".", "")
	case errors.As(err, &busy):
		c.boxPage(w, r, b, http.StatusConflict, "Another update is in progress on this box. Nothing was enqueued.", busy.JobID)
	case errors.Is(err, jobs.ErrNotConfigured):
		c.boxPage(w, r, b, http.StatusServiceUnavailable, jobs.ErrNotConfigured.Error()+". Nothing was enqueued.", "")
	case errors.Is(err, storage.ErrNotFound):
		c.notFound(w, r, "box")
	default:
		c.internal(w, r, err)
	}
}

type jobView struct {
	Job jobRow
	// Refresh is the meta refresh interval in seconds while the job is
	// live (0: finished, no refresh).
	Refresh int
	// Result is the job's stored result, indented.
	Result string
}

// job is /app/jobs/:id: one job with its latest progress, reloading
// itself while it is queued or running.
func (c *Console) job(w http.ResponseWriter, r *http.Request) {
	id := param(r, "id")
	j, err := storage.JobByID(r.Context(), c.d.DB.Read, id)
	if errors.Is(err, storage.ErrNotFound) {
		c.notFound(w, r, "job")
		return
	}
	if err != nil {
		c.internal(w, r, err)
		return
	}
	box := ""
	if b, err := storage.BoxByRef(r.Context(), c.d.DB.Read, j.ScopeID); err == nil {
		box = b.Name
	}
	v := jobView{Job: toJobRow(j, box)}
	if j.Live() {
		v.Refresh = jobRefreshSeconds
	}
	if len(j.Result) > 0 {
		var out any
		if json.Unmarshal(j.Result, &out) == nil {
			b, _ := json.MarshalIndent(out, "", "  ")
			v.Result = string(b)
		}
	}
	c.render(w, r, http.StatusOK, "job", v)
}
