package console

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/julienschmidt/httprouter"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// pageOf renders h for path with route params, signed in, and returns the
// status and body.
func pageOf(t *testing.T, h http.HandlerFunc, path string, params ...string) (int, string) {
	t.Helper()
	ctx := context.WithValue(context.Background(), ctxKey{}, session{storage.ConsoleSession{CSRFToken: "tok"}})
	var ps httprouter.Params
	for i := 0; i+1 < len(params); i += 2 {
		ps = append(ps, httprouter.Param{Key: params[i], Value: params[i+1]})
	}
	ctx = context.WithValue(ctx, httprouter.ParamsKey, ps)
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequestWithContext(ctx, "GET", path, nil))
	return rec.Code, rec.Body.String()
}

func testConsole(t *testing.T) (*Console, *storage.DB) {
	db := storagetest.NewDB(t)
	clock := clockwork.NewRealClock()
	return New(Deps{DB: db, Perf: &telemetry.PerformanceReader{DB: db, Clock: clock}, CostRule: cost.DefaultRule,
		Version: "test", Origin: "http://127.0.0.1:8080", Clock: clock, Log: zerolog.Nop()}), db
}

// TestEnvironmentRunsAndBoxes: the environment page lists the runs with
// their artifacts (an https one as a link, a local one by id) and the
// boxes with a link to their Settings → Pulumi.
func TestEnvironmentRunsAndBoxes(t *testing.T) {
	c, db := testConsole(t)
	ctx := context.Background()
	e := storagetest.Environment(t, db, storage.Environment{Slug: "harbor"})
	d := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e.ID, ID: "dep-ci"})
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.RecordRun(ctx, tx, storage.Run{EnvironmentID: e.ID, RunID: "run-42", DeploymentID: d.ID, Suite: "integration",
			Status: "passed", CommitSHA: "0123456789abcdef0123", StartedAt: now.Add(-time.Minute), FinishedAt: now, ReceivedAt: now,
			Artifacts: []storage.Artifact{
				{Name: "junit.xml", MediaType: "application/xml", SizeBytes: 2048, SHA256: strings.Repeat("a", 64), LocatorKind: "https", LocatorURL: "https://artifacts.example/run-42/junit.xml"},
				{Name: "trace.zip", MediaType: "application/zip", SizeBytes: 9, SHA256: strings.Repeat("b", 64), LocatorKind: "local", LocatorID: "art-7"},
			}}, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	storagetest.Box(t, db, storage.Box{Name: "box-gpu", EnvironmentSlug: "harbor"})
	code, body := pageOf(t, c.environment, "/app/env/harbor", "slug", "harbor")
	if code != http.StatusOK {
		t.Fatalf("status %d:\n%s", code, body)
	}
	for _, want := range []string{"1 runs, 2 artifacts", "run-42", "integration", "passed",
		`<a href="https://artifacts.example/run-42/junit.xml" rel="noreferrer noopener">junit.xml</a>`, "trace.zip (local <code>art-7</code>)",
		`<a href="/app/boxes/box-gpu">Settings → Pulumi</a>`, "free (no job queued or running)"} {
		if !strings.Contains(body, want) {
			t.Errorf("environment page lacks %q", want)
		}
	}
}

// TestEnvironmentStorage: the environment page shows what the environment
// holds against its storage budget (docs/operations.md, "Quotas").
func TestEnvironmentStorage(t *testing.T) {
	c, db := testConsole(t)
	c.d.StorageBudget = 4 << 30
	ctx := context.Background()
	e := storagetest.Environment(t, db, storage.Environment{Slug: "harbor"})
	d := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e.ID, ID: "dep-ci"})
	run := storage.Run{EnvironmentID: e.ID, RunID: "run-42", DeploymentID: d.ID, Suite: "integration", Status: "passed",
		StartedAt: time.Now(), FinishedAt: time.Now(), ReceivedAt: time.Now()}
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.RecordRun(ctx, tx, run, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	code, body := pageOf(t, c.environment, "/app/env/harbor", "slug", "harbor")
	if code != http.StatusOK {
		t.Fatalf("status %d:\n%s", code, body)
	}
	if want := `storage <strong id="storage">` + strconv.FormatInt(storage.RunCharge(run), 10) + ` B / 4.0 GiB (0%)</strong>`; !strings.Contains(body, want) {
		t.Errorf("environment page lacks %q", want)
	}
	c.d.StorageBudget = 0
	if _, body := pageOf(t, c.environment, "/app/env/harbor", "slug", "harbor"); !strings.Contains(body, "B / unlimited</strong>") {
		t.Errorf("environment page without a budget does not say unlimited")
	}
}

// TestOracleAndBoxCheckpoints: the oracle's cache tab shows each stack's
// newest checkpoint and a pending import; the box page lists the newest
// checkpointsPerStack versions, newest first, and never an export's bytes.
func TestOracleAndBoxCheckpoints(t *testing.T) {
	c, db := testConsole(t)
	ctx := context.Background()
	b := storagetest.Box(t, db, storage.Box{Name: "box-cp"})
	export := []byte(`{"secret-looking":"export body"}`)
	sum := sha256.Sum256(export)
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for i := 0; i < checkpointsPerStack+2; i++ {
			if _, err := storage.InsertStackState(ctx, tx, storage.StackState{OrganizationID: storage.PlatformOrgID, EnvironmentID: b.EnvironmentID,
				Stack: "box-cp-compute", Export: export, SHA256: sum[:], SizeBytes: int64(len(export))}, time.Now()); err != nil {
				return err
			}
		}
		return storage.PutStackImportMarker(ctx, tx, "box-cp-data", 3, time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	code, oracle := pageOf(t, c.oracle, "/app/oracle?tab=cache")
	if code != http.StatusOK {
		t.Fatalf("oracle: %d", code)
	}
	for _, want := range []string{`<code>box-cp-compute</code>: v7 (`, `<code>box-cp-data</code>: no checkpoint · import of v3 pending`, "Converge is not configured"} {
		if !strings.Contains(oracle, want) {
			t.Errorf("oracle lacks %q:\n%s", want, oracle)
		}
	}
	if code, _ := pageOf(t, c.oracle, "/app/oracle?tab=nope"); code != http.StatusNotFound {
		t.Errorf("unknown tab: %d, want 404", code)
	}
	code, page := pageOf(t, c.box, "/app/boxes/box-cp", "name", "box-cp")
	if code != http.StatusOK {
		t.Fatalf("box page: %d", code)
	}
	for v := 1; v <= 7; v++ {
		listed := strings.Contains(page, "<td>v"+strconv.Itoa(v)+"</td>")
		if want := v > 7-checkpointsPerStack; listed != want {
			t.Errorf("version %d listed %v, want %v", v, listed, want)
		}
	}
	if strings.Index(page, "<td>v7</td>") > strings.Index(page, "<td>v3</td>") {
		t.Error("checkpoints are not newest first")
	}
	if strings.Contains(page, "export body") || strings.Contains(oracle, "export body") {
		t.Error("a page shows a stack export")
	}
	if !strings.Contains(page, `disabled`) || !strings.Contains(page, "destroy box-cp") {
		t.Error("without converge the buttons are not disabled, or the destroy phrase is missing")
	}
	if !strings.Contains(page, `name="include_data"`) || !strings.Contains(page, "<code>destroy data box-cp</code>") {
		t.Error("the destroy form does not offer to include the data volume with its phrase")
	}
	t.Run("a wiped checkpoint is marked", func(t *testing.T) {
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			_, err := storage.MarkStackWiped(ctx, tx, "box-cp-compute", time.Now())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		_, page := pageOf(t, c.box, "/app/boxes/box-cp", "name", "box-cp")
		_, oracle := pageOf(t, c.oracle, "/app/oracle?tab=cache")
		if !strings.Contains(page, "<td>v8 (wiped)</td>") || !strings.Contains(page, "<td>v7</td>") || !strings.Contains(oracle, "<code>box-cp-compute</code>: v8 wiped (") {
			t.Errorf("the wiped version is not marked:\n%s\n%s", page, oracle)
		}
	})
	if code, _ := pageOf(t, c.box, "/app/boxes/"+b.ID, "name", b.ID); code != http.StatusNotFound {
		t.Errorf("a box by its id: %d, want 404 (pages name boxes)", code)
	}
}

// TestCostsByOrganization: /app/costs names each environment's
// organization and sums each organization.
func TestCostsByOrganization(t *testing.T) {
	c, db := testConsole(t)
	ctx := context.Background()
	var env storage.Environment
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		o, err := storage.CreateOrganization(ctx, tx, "acme", "Acme", time.Now())
		if err != nil {
			return err
		}
		env, err = storage.CreateEnvironmentInOrg(ctx, tx, o.ID, "acme-web", "acme web", time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, LaunchedAt: time.Now().Add(-time.Hour)})
	p := storagetest.Environment(t, db, storage.Environment{Slug: "platform-env"})
	storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: p.ID, LaunchedAt: time.Now().Add(-time.Hour)})
	code, body := pageOf(t, c.costs, "/app/costs")
	if code != http.StatusOK {
		t.Fatalf("costs: %d", code)
	}
	for _, want := range []string{`<a href="/app/env/acme-web">acme-web</a></th><td>acme</td>`, `<table id="org-costs">`, `<th scope="row">acme</th>`} {
		if !strings.Contains(body, want) {
			t.Errorf("costs page lacks %q:\n%s", want, body)
		}
	}
}

// TestFleetLabelsAndDestruction: an empty fleet says so; an environment
// whose slug starts with syntheticPrefix is labelled synthetic and no
// other is; a deployment with a reaper-destroyed event shows "Destruction
// reported" with the event's reason, and its sibling without one does not.
func TestFleetLabelsAndDestruction(t *testing.T) {
	c, db := testConsole(t)
	ctx := context.Background()
	if code, body := pageOf(t, c.fleet, "/app"); code != http.StatusOK || !strings.Contains(body, `id="empty-fleet"`) {
		t.Fatalf("empty fleet: %d, labelled %v", code, strings.Contains(body, `id="empty-fleet"`))
	}
	storagetest.Environment(t, db, storage.Environment{Slug: syntheticPrefix + "check"})
	e := storagetest.Environment(t, db, storage.Environment{Slug: "harbor"})
	_, fleet := pageOf(t, c.fleet, "/app")
	rowOf := func(slug string) string {
		i := strings.Index(fleet, `<a href="/app/env/`+slug+`">`)
		if i < 0 {
			t.Fatalf("fleet lacks %s:\n%s", slug, fleet)
		}
		return fleet[i : i+strings.Index(fleet[i:], "</th>")]
	}
	if strings.Contains(fleet, `id="empty-fleet"`) {
		t.Error("a fleet with environments is labelled empty")
	}
	for slug, want := range map[string]bool{syntheticPrefix + "check": true, "harbor": false} {
		if got := strings.Contains(rowOf(slug), `class="tag">synthetic<`); got != want {
			t.Errorf("%s labelled synthetic %v, want %v", slug, got, want)
		}
	}

	gone := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e.ID, ID: "dep-gone"})
	storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e.ID, ID: "dep-other"})
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{ID: "ev-destroyed", EnvironmentID: e.ID, DeploymentID: gone.ID,
			Kind: reaper.KindDestroyed, Reason: "idle", Message: "droplet 42 destroyed", OccurredAt: time.Now()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"dep-gone": true, "dep-other": false} {
		code, body := pageOf(t, c.deployment, "/app/env/harbor/deployments/"+id, "slug", "harbor", "id", id)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", id, code)
		}
		got := strings.Contains(body, `id="destruction"><strong>Destruction reported</strong>`)
		if got != want || (want && !strings.Contains(body, "idle — droplet 42 destroyed")) {
			t.Errorf("%s: destruction shown %v, want %v:\n%s", id, got, want, body)
		}
	}
}

// TestDeploymentSessionsAndAnomalies: the deployment page lists its
// telemetry sessions with their terminal summary ("not summarized yet"
// before one exists) and the anomalies recorded for them.
func TestDeploymentSessionsAndAnomalies(t *testing.T) {
	c, db := testConsole(t)
	ctx := context.Background()
	e := storagetest.Environment(t, db, storage.Environment{Slug: "harbor"})
	d := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e.ID, ID: "dep-s"})
	start := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	for _, s := range []string{"sess-done", "sess-open"} {
		storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: e.ID, DeploymentID: d.ID, SessionID: s, WindowStart: start})
	}
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE telemetry_sessions SET summary = ? WHERE id = ?`, `{"windows":1,"marker":"summary-of-done"}`, "sess-done"); err != nil {
			return err
		}
		return storage.RecordTelemetryAnomaly(ctx, tx, storage.TelemetryAnomaly{EnvironmentID: e.ID, DeploymentID: d.ID, SessionID: "sess-done",
			Kind: "gpu-idle", FirstSeenAt: start, LastSeenAt: start.Add(time.Minute)})
	}); err != nil {
		t.Fatal(err)
	}
	code, body := pageOf(t, c.deployment, "/app/env/harbor/deployments/dep-s?range=1h", "slug", "harbor", "id", "dep-s")
	if code != http.StatusOK {
		t.Fatalf("status %d:\n%s", code, body)
	}
	sessions := body[strings.Index(body, `<table id="sessions">`):]
	sessions = sessions[:strings.Index(sessions, "</table>")]
	for _, want := range []string{"<code>sess-done</code>", "summary-of-done", "<code>sess-open</code>", "not summarized yet"} {
		if !strings.Contains(sessions, want) {
			t.Errorf("sessions table lacks %q:\n%s", want, sessions)
		}
	}
	if !strings.Contains(body, `<table id="anomalies">`) || !strings.Contains(body, "<td><code>sess-done</code></td><td>gpu-idle</td>") {
		t.Errorf("anomalies table lacks sess-done's gpu-idle:\n%s", body)
	}
}

// TestDeploymentLinksLogs: the deployment page lists the deployment's log
// sessions and links each committed chunk (not a planned one) to the
// console's download route, which answers 303 to a presigned GET of that
// chunk's object valid at most logs.MaxGrantTTL; a planned chunk is 404.
// Without log storage the sessions are listed unlinked and the route is
// 503.
func TestDeploymentLinksLogs(t *testing.T) {
	c, db := testConsole(t)
	ctx := context.Background()
	e := storagetest.Environment(t, db, storage.Environment{Slug: "harbor"})
	d := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e.ID, ID: "dep-l"})
	now := time.Now().UTC()
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		row, err := storage.InsertLogSession(ctx, tx, storage.LogSession{EnvironmentID: e.ID, DeploymentID: d.ID, SessionID: "s-logs",
			Service: "cloud-init.service", OpenedAt: now, ExpiresAt: now.Add(time.Hour)})
		if err != nil {
			return err
		}
		for seq := range int64(2) {
			sum := sha256.Sum256([]byte{byte(seq)})
			if err := storage.PlanLogChunk(ctx, tx, e.ID, d.ID, storage.LogChunk{SessionRow: row, Seq: seq, ObjectKey: "logs/e1/dep-l/s-logs/" + strconv.Itoa(int(seq)) + ".chunk",
				Size: 10, SHA256: sum[:], PlannedAt: now, GrantExpiresAt: now.Add(time.Minute)}); err != nil {
				return err
			}
		}
		_, err = storage.CommitLogChunk(ctx, tx, row, 0, now)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	link := `href="/app/env/harbor/deployments/dep-l/logs/s-logs/0"`
	route := func(c *Console, seq string) *httptest.ResponseRecorder {
		t.Helper()
		rctx := context.WithValue(context.Background(), ctxKey{}, session{storage.ConsoleSession{CSRFToken: "tok"}})
		rctx = context.WithValue(rctx, httprouter.ParamsKey, httprouter.Params{{Key: "slug", Value: "harbor"}, {Key: "id", Value: "dep-l"},
			{Key: "session", Value: "s-logs"}, {Key: "seq", Value: seq}})
		rec := httptest.NewRecorder()
		c.logChunk(rec, httptest.NewRequestWithContext(rctx, "GET", "/app/env/harbor/deployments/dep-l/logs/s-logs/"+seq, nil))
		return rec
	}
	t.Run("without log storage", func(t *testing.T) {
		code, body := pageOf(t, c.deployment, "/app/env/harbor/deployments/dep-l", "slug", "harbor", "id", "dep-l")
		if code != http.StatusOK || !strings.Contains(body, `<table id="logs">`) || !strings.Contains(body, "<code>s-logs</code>") ||
			!strings.Contains(body, "1 of 2 committed") || strings.Contains(body, link) || !strings.Contains(body, "CHALUPA_LOGS_URL") {
			t.Fatalf("status %d, want the session listed without links:\n%s", code, body)
		}
		if rec := route(c, "0"); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("download without log storage: %d, want 503", rec.Code)
		}
	})
	t.Run("with log storage", func(t *testing.T) {
		loc, err := logs.ParseLocation("s3://bucket/logs?endpoint=http://127.0.0.1:9&region=us-east-1")
		if err != nil {
			t.Fatal(err)
		}
		withLogs := New(Deps{DB: db, Logs: logs.NewS3(loc, "KEY", "SECRET", nil), Perf: c.d.Perf, CostRule: cost.DefaultRule,
			Version: "test", Origin: "http://127.0.0.1:8080", Clock: clockwork.NewRealClock(), Log: zerolog.Nop()})
		code, body := pageOf(t, withLogs.deployment, "/app/env/harbor/deployments/dep-l", "slug", "harbor", "id", "dep-l")
		if code != http.StatusOK || !strings.Contains(body, link) || strings.Contains(body, `/logs/s-logs/1"`) || !strings.Contains(body, "1 (planned)") {
			t.Fatalf("status %d, want chunk 0 linked and chunk 1 not:\n%s", code, body)
		}
		rec := route(withLogs, "0")
		u, err := url.Parse(rec.Header().Get("Location"))
		if rec.Code != http.StatusSeeOther || err != nil || u.Path != "/bucket/logs/e1/dep-l/s-logs/0.chunk" || u.Query().Get("X-Amz-Expires") == "" {
			t.Fatalf("download: %d Location %q, want 303 to a presigned GET of the chunk's object", rec.Code, rec.Header().Get("Location"))
		}
		if ttl, _ := strconv.Atoi(u.Query().Get("X-Amz-Expires")); time.Duration(ttl)*time.Second > logs.MaxGrantTTL {
			t.Fatalf("grant valid %ds, past %v", ttl, logs.MaxGrantTTL)
		}
		for _, seq := range []string{"1", "2", "-1", "x"} {
			if rec := route(withLogs, seq); rec.Code != http.StatusNotFound {
				t.Errorf("chunk %s: %d, want 404", seq, rec.Code)
			}
		}
	})
}

// TestInternalStorageFault: a console write that met a storage fault is a
// 503 with Retry-After that says nothing was saved; any other fault stays a
// bare 500 (docs/operations.md, "HTTP surface and errors").
func TestInternalStorageFault(t *testing.T) {
	c, _ := testConsole(t)
	for _, tc := range []struct {
		name   string
		err    error
		status int
		retry  string
	}{
		{"disk full", fmt.Errorf("commit write: %w", &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}), http.StatusServiceUnavailable, "5"},
		{"other fault", errors.New("boom"), http.StatusInternalServerError, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			c.internal(rec, httptest.NewRequest("POST", "/app/password", nil), tc.err)
			if rec.Code != tc.status || rec.Header().Get("Retry-After") != tc.retry {
				t.Fatalf("got %d (Retry-After %q), want %d (%q)", rec.Code, rec.Header().Get("Retry-After"), tc.status, tc.retry)
			}
			if tc.retry != "" && !strings.Contains(rec.Body.String(), "nothing was saved") {
				t.Fatalf("body does not say nothing was saved:\n%s", rec.Body.String())
			}
		})
	}
}

// TestBoxPageAgentIsTheDeclaration: the box page's agent line is the
// declaration for the box's next droplet (docs/operations.md, "Boxes"):
// off says what a running reaper does with that droplet, and a change
// made after the recorded droplet launched says that droplet keeps what it
// booted with ("off: no agent is installed" was untrue of it).
func TestBoxPageAgentIsTheDeclaration(t *testing.T) {
	c, db := testConsole(t)
	ctx := context.Background()
	b := storagetest.Box(t, db, storage.Box{Name: "box-agent"})
	launched := time.Now().Add(-time.Hour)
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		if err := storage.RecordBoxResources(ctx, tx, b.ID, storage.BoxResources{DropletID: 4242}, launched); err != nil {
			return err
		}
		if err := storage.RecordBoxLaunch(ctx, tx, b.ID, storage.BoxLaunch{DropletID: 4242, LaunchedAt: launched, JobID: "01JOB"}, launched); err != nil {
			return err
		}
		cfg := b.Config
		cfg.Agent = false
		_, err := storage.UpdateBox(ctx, tx, b.ID, false, cfg, time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	code, page := pageOf(t, c.box, "/app/boxes/box-agent", "name", "box-agent")
	if code != http.StatusOK {
		t.Fatalf("box page: %d", code)
	}
	for _, want := range []string{"off for the box's next droplet", "a running reaper ends that droplet at its launch deadline",
		"droplet 4242 launched before the last change and keeps what it booted with"} {
		if !strings.Contains(page, want) {
			t.Errorf("box page does not say %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "no agent is installed") {
		t.Errorf("box page says no agent is installed, untrue of droplet 4242:\n%s", page)
	}
}

// TestWordsDefinedWhereTheyAppear: "sunk", "oracle" and "managed" carry
// their definition on the pages that show them (title text or a note), so
// an operator never meets them undefined (docs/operations.md, "Console").
func TestWordsDefinedWhereTheyAppear(t *testing.T) {
	c, db := testConsole(t)
	storagetest.Environment(t, db, storage.Environment{Slug: "gone", Status: "sunk"})
	storagetest.Box(t, db, storage.Box{Name: "box-m", Managed: true})
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		path string
		ps   []string
		want string
	}{
		{"fleet sunk", c.fleet, "/app", nil, `title="No deployment runs in this environment; the next deployment's first heartbeat makes it active again">sunk</abbr>`},
		{"environment sunk", c.environment, "/app/env/gone", []string{"slug", "gone"}, `>sunk</abbr>`},
		{"oracle page", c.oracle, "/app/oracle?tab=cache", nil, `The oracle is chalupa's own record of each box's declared resources`},
		{"oracle link", c.fleet, "/app", nil, `title="The oracle: chalupa's own record`},
		{"box managed", c.box, "/app/boxes/box-m", []string{"name", "box-m"}, `whatever the environment's organization">managed</abbr>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := pageOf(t, tc.h, tc.path, tc.ps...)
			if code != http.StatusOK {
				t.Fatalf("%s: %d", tc.path, code)
			}
			if !strings.Contains(html.UnescapeString(body), tc.want) {
				t.Errorf("%s lacks %q:\n%s", tc.path, tc.want, body)
			}
		})
	}
}
