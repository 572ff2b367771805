package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/internal/bytesize"
	"github.com/chalupa-run/chalupa/internal/slug"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

// Page bounds: every list a page shows is capped, so a page's weight and
// render time stay bounded however large the fleet grows.
const (
	// fleetEndedLimit is how many ended deployments per environment the
	// environment page lists (like the admin fleet view).
	fleetEndedLimit = 20
	// eventsLimit is how many lifecycle events a page lists.
	eventsLimit = 100
	// envEventsLimit is how many an environment page lists.
	envEventsLimit = 30
	// keysLimit is how many ingest keys an environment page lists.
	keysLimit = 50
	// envRunsLimit is how many CI runs (with their artifacts) an
	// environment page lists, the most recently started.
	envRunsLimit = 20
	// envBoxesLimit is how many boxes an environment page lists.
	envBoxesLimit = 50
)

// The environment page's per-deployment sparkline: CPU % at each
// sparkStep mark of the last sparkSpan (24 marks), each the minute window
// starting on the mark. Marks, not bucket means: a mark is one seek per
// session, so 100 deployments cost 2,400 rows, where every minute of 6 h
// would cost 36,000 — past the page's 50 ms (docs/operations.md,
// "Console").
const (
	sparkSpan = 6 * time.Hour
	sparkStep = 15 * time.Minute
)

// syntheticPrefix marks environments that exist for tests and the smoke
// run, labelled as such on the fleet page.
const syntheticPrefix = "smoke-"

// ranges are the deployment page's chart ranges with the step each uses:
// at most 180 points per series, so every point can carry its value as a
// <title> and the page stays under 100 KB (docs/operations.md, "Console").
var ranges = []struct {
	Name string
	Span time.Duration
	Step time.Duration
}{
	{"1h", time.Hour, time.Minute},
	{"24h", 24 * time.Hour, 10 * time.Minute},
	{"7d", 7 * 24 * time.Hour, time.Hour},
	{"30d", 30 * 24 * time.Hour, 4 * time.Hour},
}

var funcs = template.FuncMap{
	"ago":      ago,
	"until":    until,
	"usd":      func(f float64) string { return fmt.Sprintf("$%.2f", f) },
	"ts":       func(t time.Time) string { return stamp(t) },
	"iso":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"notZero":  func(t time.Time) bool { return !t.IsZero() },
	"orgTotal": func(o cost.OrganizationCost) float64 { return o.ComputeUSD + o.StorageUSD },
}

func parseTemplates() map[string]*template.Template {
	// The layout and the partials (templates/_*.html, shared definitions)
	// are in every page.
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/_*.html"))
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" || strings.HasPrefix(base, "_") {
			continue
		}
		out[base] = template.Must(template.Must(layout.Clone()).ParseFS(templateFS, n))
	}
	return out
}

// layoutView is what every page shows: title, the storage and clock
// banners, and, signed in only, the build version, replication health and
// the signed-in controls.
type layoutView struct {
	Title       string
	Version     string
	ReplWarning string
	ReplOK      string
	// ClockWarning is the reaper's clock guard while it holds.
	ClockWarning string
	// OffsetWarning is the fleet's clock offset while it is beyond 30 s.
	OffsetWarning string
	// StorageWarning is Deps.StorageWarning's text.
	StorageWarning string
	// ModeWarning is Deps.ModeWarning.
	ModeWarning string
	SignedIn    bool
	CSRF        string
	Page        any
}

// replication states the replica's health in words: a warning while it
// fails or lags past half its limit.
func (c *Console) replication() (warning, ok string) {
	if c.d.Replication == nil {
		return "Replication is not running.", ""
	}
	h := c.d.Replication(c.d.Clock.Now())
	switch {
	case h.Failing:
		w := fmt.Sprintf("Replication is failing: the replica lags %.0f s (limit %.0f s)", h.LagSeconds, h.LagLimitSeconds)
		if h.LastError != "" {
			w += "; last error: " + h.LastError
		}
		return w + ". Readiness reports unavailable.", ""
	case h.LagLimitSeconds > 0 && h.LagSeconds > h.LagLimitSeconds/2:
		return fmt.Sprintf("Replication lags %.0f s (limit %.0f s).", h.LagSeconds, h.LagLimitSeconds), ""
	}
	return "", fmt.Sprintf("replica %s, lag %.0f s", h.Kind, h.LagSeconds)
}

// render writes page name with the layout around it; a template error is
// a redacted 500.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	lv := layoutView{Page: data}
	if c.d.ClockWarning != nil {
		lv.ClockWarning = c.d.ClockWarning()
	}
	if c.d.OffsetWarning != nil {
		lv.OffsetWarning = c.d.OffsetWarning()
	}
	if c.d.StorageWarning != nil {
		lv.StorageWarning = c.d.StorageWarning()
	}
	if s, ok := r.Context().Value(ctxKey{}).(session); ok {
		lv.SignedIn, lv.CSRF = true, s.CSRFToken
		// Signed in only: the fleet's configuration, the build version
		// and the replica's type and health are not for a visitor of the
		// public pages (docs/operations.md, "Console").
		lv.ModeWarning, lv.Version = c.d.ModeWarning, c.d.Version
		lv.ReplWarning, lv.ReplOK = c.replication()
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout.html", lv); err != nil {
		c.d.Log.Error().Err(err).Str("page", name).Msg("console: render failed")
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type failView struct{ Heading, Message string }

// fail answers an error page; the message is fixed text, never an error's.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, heading, msg string) {
	c.render(w, r, status, "error", failView{heading, msg})
}

// storageRetryAfter is the Retry-After of a console page answered 503
// because a write met a storage fault, in seconds (docs/operations.md,
// "HTTP surface and errors").
const storageRetryAfter = "5"

// internal logs err against the request id and answers a bare 500; a
// storage fault (disk full, I/O error, read-only file system) is a 503 with
// Retry-After instead, since nothing was kept and a retry is safe.
func (c *Console) internal(w http.ResponseWriter, r *http.Request, err error) {
	if kind := storage.FaultKind(err); kind != "" {
		c.d.Log.Warn().Str("fault", kind).Str("request_id", w.Header().Get("X-Request-Id")).Msg("console: storage unavailable")
		w.Header().Set("Retry-After", storageRetryAfter)
		c.fail(w, r, http.StatusServiceUnavailable, "Storage unavailable", "The server cannot store changes right now; nothing was saved. Try again in a few seconds.")
		return
	}
	c.d.Log.Error().Err(err).Str("request_id", w.Header().Get("X-Request-Id")).Msg("console: internal error")
	c.fail(w, r, http.StatusInternalServerError, "Internal error", "Something went wrong; the server log has the details.")
}

func (c *Console) landing(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "landing", nil)
}

// fleetRow is one environment on the fleet page.
type fleetRow struct {
	Slug, Name, Status string
	Synthetic          bool
	Active             int
	IdleDeadline       time.Time
	CI                 bool
	LastHeartbeat      time.Time
	CostUSD            float64
	Now                time.Time
}

type fleetView struct {
	Rows     []fleetRow
	Month    string
	TotalUSD float64
	Now      time.Time
	// Active counts the fleet's active deployments; Deadlines are the
	// soonest fleetDeadlines idle deadlines among them, soonest first,
	// shown at the top with the month's cost.
	Active    int
	Deadlines []fleetDeadline
	// Alerts are the open alerts, critical first then oldest first, at
	// the top of the page (docs/operations.md, "Alerts").
	Alerts []fleetAlert
}

// fleetAlert is one open alert on the fleet page: what, where, since when,
// whether a person acknowledged it or its kind is muted, and the
// condition's first thing to do.
type fleetAlert struct {
	ID, Kind, Severity, Subject string
	Since                       time.Time
	Acked, Muted                bool
	Action                      string
}

// openAlerts returns the open alerts for the fleet page, critical first,
// then oldest first.
func (c *Console) openAlerts(r *http.Request, now time.Time) ([]fleetAlert, error) {
	open, err := storage.OpenAlerts(r.Context(), c.d.DB.Read)
	if err != nil || len(open) == 0 {
		return nil, err
	}
	mutes, err := storage.AlertMutes(r.Context(), c.d.DB.Read, now)
	if err != nil {
		return nil, err
	}
	muted := map[string]bool{}
	for _, m := range mutes {
		muted[m.Kind] = true
	}
	out := make([]fleetAlert, 0, len(open))
	for _, a := range open {
		fa := fleetAlert{ID: a.ID, Kind: a.Kind, Severity: a.Severity, Since: a.OpenedAt, Acked: !a.AckedAt.IsZero(), Muted: muted[a.Kind],
			Subject: alerts.Subject{Kind: a.SubjectKind, ID: a.SubjectID}.String()}
		if cond, ok := alerts.Lookup(a.Kind); ok {
			fa.Action = cond.Action
		}
		out = append(out, fa)
	}
	slices.SortStableFunc(out, func(a, b fleetAlert) int {
		if (a.Severity == string(alerts.Critical)) != (b.Severity == string(alerts.Critical)) {
			if a.Severity == string(alerts.Critical) {
				return -1
			}
			return 1
		}
		return 0
	})
	return out, nil
}

// fleetDeadline is one active deployment's idle deadline on the fleet
// page's summary.
type fleetDeadline struct {
	Env, ID  string
	Deadline time.Time
	CI       bool
}

// fleetDeadlines is how many idle deadlines the fleet page's summary lists.
const fleetDeadlines = 5

func (c *Console) monthEstimate(r *http.Request, now time.Time) (cost.Estimate, error) {
	start, _ := cost.MonthBounds(now.UTC())
	return cost.EstimateMonth(r.Context(), c.d.DB.Read, c.d.CostRule, start, now.UTC())
}

func (c *Console) fleet(w http.ResponseWriter, r *http.Request) {
	now := c.d.Clock.Now()
	// One ended deployment per environment: a sunk environment's last
	// heartbeat is its newest ended deployment's.
	envs, err := storage.Fleet(r.Context(), c.d.DB.Read, 1)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	est, err := c.monthEstimate(r, now)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	costs := map[string]float64{}
	for _, e := range est.Environments {
		costs[e.Slug] = e.TotalUSD()
	}
	v := fleetView{Month: est.Month, TotalUSD: est.TotalUSD(), Now: now}
	if v.Alerts, err = c.openAlerts(r, now); err != nil {
		c.internal(w, r, err)
		return
	}
	for _, e := range envs {
		row := fleetRow{Slug: e.Slug, Name: e.Name, Status: e.Status, Synthetic: strings.HasPrefix(e.Slug, syntheticPrefix),
			CostUSD: costs[e.Slug], Now: now}
		for _, d := range e.Deployments {
			if d.LastHeartbeatAt.After(row.LastHeartbeat) {
				row.LastHeartbeat = d.LastHeartbeatAt
			}
			if d.Status != "active" {
				continue
			}
			row.Active++
			row.CI = row.CI || d.CIActive
			v.Active++
			if !d.IdleDeadlineAt.IsZero() {
				v.Deadlines = append(v.Deadlines, fleetDeadline{Env: e.Slug, ID: d.ID, Deadline: d.IdleDeadlineAt, CI: d.CIActive})
			}
			if !d.IdleDeadlineAt.IsZero() && (row.IdleDeadline.IsZero() || d.IdleDeadlineAt.Before(row.IdleDeadline)) {
				row.IdleDeadline = d.IdleDeadlineAt
			}
		}
		v.Rows = append(v.Rows, row)
	}
	slices.SortFunc(v.Deadlines, func(a, b fleetDeadline) int { return a.Deadline.Compare(b.Deadline) })
	v.Deadlines = v.Deadlines[:min(len(v.Deadlines), fleetDeadlines)]
	c.render(w, r, http.StatusOK, "fleet", v)
}

type envView struct {
	Env         storage.Environment
	Deployments []storage.Deployment
	Keys        []storage.IngestKeySummary
	Events      []storage.LifecycleEventRow
	Runs        []storage.Run
	// RunsTotal and ArtifactsTotal count everything the environment
	// holds (Runs shows the newest envRunsLimit).
	RunsTotal, ArtifactsTotal int
	Boxes                     []envBox
	Now                       time.Time
	// Storage is the environment's charged bytes against its storage
	// budget, as text ("1.5 MiB / 4.0 GiB (0%)").
	Storage string
	// Sparks are the listed deployments' CPU sparklines by deployment id.
	Sparks map[string]template.HTML
}

// envBox is a box on its environment's page with its lock.
type envBox struct {
	Box  storage.Box
	Lock lockView
}

func (c *Console) notFound(w http.ResponseWriter, r *http.Request, what string) {
	c.fail(w, r, http.StatusNotFound, "Not found", "No "+what+" by this name.")
}

func (c *Console) environment(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sl := param(r, "slug")
	if !slug.Valid(sl) {
		c.notFound(w, r, "environment")
		return
	}
	env, err := storage.EnvironmentBySlug(ctx, c.d.DB.Read, sl)
	if errors.Is(err, storage.ErrNotFound) {
		c.notFound(w, r, "environment")
		return
	} else if err != nil {
		c.internal(w, r, err)
		return
	}
	v := envView{Env: env, Now: c.d.Clock.Now(), Storage: bytesize.Budget(env.StorageBytes, c.d.StorageBudget)}
	if v.Deployments, err = storage.DeploymentsOf(ctx, c.d.DB.Read, env.ID, fleetEndedLimit); err != nil {
		c.internal(w, r, err)
		return
	}
	now := v.Now
	var marks []time.Time
	for t := now.Add(-sparkSpan).Truncate(sparkStep).Add(sparkStep); !t.After(now); t = t.Add(sparkStep) {
		marks = append(marks, t)
	}
	means, err := storage.EnvironmentCPUMarks(ctx, c.d.DB.Read, env.ID, marks)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	v.Sparks = make(map[string]template.HTML, len(v.Deployments))
	for _, d := range v.Deployments {
		pts := make([]xy, len(means[d.ID]))
		for i, m := range means[d.ID] {
			pts[i] = xy{m.At, m.Mean}
		}
		v.Sparks[d.ID] = renderSpark(pts, now.Add(-sparkSpan), now, sparkStep)
	}
	if v.Keys, err = storage.IngestKeysOf(ctx, c.d.DB.Read, env.ID, keysLimit); err != nil {
		c.internal(w, r, err)
		return
	}
	if v.Events, err = storage.ListLifecycleEvents(ctx, c.d.DB.Read, storage.EventFilter{EnvironmentSlug: env.Slug, Limit: envEventsLimit}); err != nil {
		c.internal(w, r, err)
		return
	}
	if v.Runs, err = storage.ListRuns(ctx, c.d.DB.Read, env.ID, envRunsLimit); err != nil {
		c.internal(w, r, err)
		return
	}
	if v.RunsTotal, v.ArtifactsTotal, err = storage.CountRuns(ctx, c.d.DB.Read, env.ID); err != nil {
		c.internal(w, r, err)
		return
	}
	boxes, err := storage.ListBoxes(ctx, c.d.DB.Read, env.Slug)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	for i, b := range boxes {
		if i == envBoxesLimit {
			break
		}
		eb := envBox{Box: b}
		if eb.Lock, err = c.lockOf(r, b.ID); err != nil {
			c.internal(w, r, err)
			return
		}
		v.Boxes = append(v.Boxes, eb)
	}
	c.render(w, r, http.StatusOK, "environment", v)
}

type rangeLink struct {
	Name    string
	Current bool
}

type deploymentView struct {
	Env, ID     string
	Range       string
	Ranges      []rangeLink
	From, To    time.Time
	Step        time.Duration
	Hourly      bool
	Note        string
	Charts      []chartView
	Sessions    []sessionRow
	Truncated   bool
	Anomalies   []adminapi.PerformanceAnomaly
	Destruction *storage.LifecycleEventRow
	// LogSessions are the deployment's log sessions; LogsOn is set when
	// committed chunks can be downloaded (CHALUPA_LOGS_URL).
	LogSessions []logSessionRow
	LogsOn      bool
}

// logSessionRow is one log session on the deployment page with its
// chunks, committed ones linked to their download grant.
type logSessionRow struct {
	storage.LogSession
	Chunks    []storage.LogChunk
	Committed int
}

type sessionRow struct {
	adminapi.PerformanceSession
	SummaryText string
}

func (c *Console) deployment(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sl, id := param(r, "slug"), param(r, "id")
	rg := ranges[1]
	for _, x := range ranges {
		if x.Name == r.URL.Query().Get("range") {
			rg = x
		}
	}
	if !slug.Valid(sl) || !slug.ValidID(id) {
		c.notFound(w, r, "deployment")
		return
	}
	now := c.d.Clock.Now()
	p, err := c.d.Perf.Read(ctx, adminapi.DeploymentPerformanceRequest{EnvironmentSlug: sl, DeploymentID: id,
		From: now.Add(-rg.Span), To: now, Step: rg.Step})
	if err != nil {
		if errors.Is(err, telemetry.ErrUnknownEnvironment) || errors.Is(err, telemetry.ErrUnknownDeployment) {
			c.notFound(w, r, "deployment")
			return
		}
		c.internal(w, r, err)
		return
	}
	v := deploymentView{Env: sl, ID: id, Range: rg.Name, From: p.From, To: p.To, Step: rg.Step,
		Hourly: p.HourlyResolution, Note: p.Note, Truncated: p.SessionsTruncated, Anomalies: p.Anomalies}
	for _, x := range ranges {
		v.Ranges = append(v.Ranges, rangeLink{x.Name, x.Name == rg.Name})
	}
	v.Charts = renderPanels(p.Series, now.Add(-rg.Span), now, rg.Step)
	for _, s := range p.Sessions {
		v.Sessions = append(v.Sessions, sessionRow{PerformanceSession: s, SummaryText: string(s.Summary)})
	}
	evs, err := storage.ListLifecycleEvents(ctx, c.d.DB.Read, storage.EventFilter{EnvironmentSlug: sl, Kind: reaper.KindDestroyed, Limit: eventsLimit})
	if err != nil {
		c.internal(w, r, err)
		return
	}
	for i := range evs {
		if evs[i].DeploymentID == id {
			v.Destruction = &evs[i]
			break
		}
	}
	if v.LogSessions, err = c.logSessions(r, sl, id); err != nil {
		c.internal(w, r, err)
		return
	}
	v.LogsOn = c.d.Logs != nil
	c.render(w, r, http.StatusOK, "deployment", v)
}

// logSessions reads the deployment's log sessions and their chunks (at most
// the deployment's chunk quota, 256, in all).
func (c *Console) logSessions(r *http.Request, sl, id string) ([]logSessionRow, error) {
	ctx := r.Context()
	env, err := storage.EnvironmentBySlug(ctx, c.d.DB.Read, sl)
	if err != nil {
		return nil, err
	}
	sessions, err := storage.LogSessionsOf(ctx, c.d.DB.Read, env.ID, id, "", "")
	if err != nil {
		return nil, err
	}
	var out []logSessionRow
	for _, s := range sessions {
		chunks, err := storage.LogChunksOf(ctx, c.d.DB.Read, s.Row)
		if err != nil {
			return nil, err
		}
		row := logSessionRow{LogSession: s, Chunks: chunks}
		for _, ch := range chunks {
			if ch.State == storage.LogChunkCommitted {
				row.Committed++
			}
		}
		out = append(out, row)
	}
	return out, nil
}

// logChunk redirects (303) to a short-lived presigned GET of one committed
// log chunk: the bytes go from the store to the browser, never through the
// daemon (docs/operations.md, "Logs"). An unknown or uncommitted chunk is
// 404; without log storage, 503.
func (c *Console) logChunk(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sl, id, sess := param(r, "slug"), param(r, "id"), param(r, "session")
	seq, err := strconv.ParseInt(param(r, "seq"), 10, 64)
	if !slug.Valid(sl) || !slug.ValidID(id) || err != nil || seq < 0 {
		c.notFound(w, r, "log chunk")
		return
	}
	if c.d.Logs == nil {
		c.fail(w, r, http.StatusServiceUnavailable, "Logs are not configured", "This chalupa has no log storage (CHALUPA_LOGS_URL).")
		return
	}
	env, err := storage.EnvironmentBySlug(ctx, c.d.DB.Read, sl)
	if errors.Is(err, storage.ErrNotFound) {
		c.notFound(w, r, "log chunk")
		return
	} else if err != nil {
		c.internal(w, r, err)
		return
	}
	s, err := storage.LogSessionByID(ctx, c.d.DB.Read, env.ID, id, sess)
	var ch storage.LogChunk
	if err == nil {
		ch, err = storage.LogChunkBySeq(ctx, c.d.DB.Read, s.Row, seq)
	}
	if errors.Is(err, storage.ErrNotFound) || (err == nil && ch.State != storage.LogChunkCommitted) {
		c.notFound(w, r, "log chunk")
		return
	} else if err != nil {
		c.internal(w, r, err)
		return
	}
	g, err := c.d.Logs.PresignGet(ctx, ch.ObjectKey, logs.DefaultGrantTTL)
	if err != nil {
		c.internal(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, g.URL, http.StatusSeeOther)
}

type eventsView struct {
	Events []storage.LifecycleEventRow
	Limit  int
}

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	evs, err := storage.ListLifecycleEvents(r.Context(), c.d.DB.Read, storage.EventFilter{Limit: eventsLimit})
	if err != nil {
		c.internal(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "events", eventsView{Events: evs, Limit: eventsLimit})
}

type costsView struct {
	Est  cost.Estimate
	Note string
	Last *storage.CostSnapshot
	// Orgs maps an organization id to its slug, for the environment
	// table's organization column.
	Orgs map[int64]string
}

func (c *Console) costs(w http.ResponseWriter, r *http.Request) {
	est, err := c.monthEstimate(r, c.d.Clock.Now())
	if err != nil {
		c.internal(w, r, err)
		return
	}
	v := costsView{Est: est, Note: adminapi.CostsEstimateNote, Orgs: map[int64]string{}}
	for _, o := range est.Organizations {
		v.Orgs[o.OrgID] = o.Slug
	}
	snap, err := storage.LatestCostSnapshot(r.Context(), c.d.DB.Read)
	switch {
	case errors.Is(err, storage.ErrNotFound):
	case err != nil:
		c.internal(w, r, err)
		return
	default:
		v.Last = &snap
	}
	c.render(w, r, http.StatusOK, "costs", v)
}

// ago says how long before now t was, in words ("never" for zero).
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return short(now.Sub(t)) + " ago"
}

// until says how long after now t is: a countdown rendered on the server.
func until(now, t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	if !t.After(now) {
		return "passed " + short(now.Sub(t)) + " ago"
	}
	return "in " + short(t.Sub(now))
}

func short(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(math.Mod(d.Minutes(), 60)))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// param is the route parameter name of r.
func param(r *http.Request, name string) string {
	return httprouter.ParamsFromContext(r.Context()).ByName(name)
}
