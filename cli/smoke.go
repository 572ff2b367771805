package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/internal/datadir"
	"github.com/chalupa-run/chalupa/internal/lazyre"
	"github.com/chalupa-run/chalupa/protocol"
)

// smokeCmd runs the private smoke list against a running chalupa
// (docs/operations.md, "Smoke test"). Secrets come from the environment or
// files: CHALUPA_ADMIN_TOKEN and CHALUPA_READY_TOKEN (else secrets.env in
// --data-dir), the console password from CHALUPA_CONSOLE_PASSWORD or
// --password-file. It never creates or destroys a droplet.
type smokeCmd struct {
	URL          string        `name:"url" env:"CHALUPA_URL" help:"Daemon to check (default: the address serve recorded in --data-dir; http://127.0.0.1:8080 only when --data-dir does not exist)."`
	DataDir      string        `name:"data-dir" env:"CHALUPA_DATA_DIR" default:"${default_data_dir}" help:"Where to find the generated secrets file when the tokens are not in the environment."`
	PasswordFile string        `name:"password-file" type:"path" help:"Console password file (mode 600); else CHALUPA_CONSOLE_PASSWORD."`
	Env          string        `name:"env" default:"smoke-check" help:"The synthetic environment to use (created when missing; must start with smoke-)."`
	Timeout      time.Duration `default:"60s" help:"Budget for the whole run."`
	JSON         bool          `help:"Print the rows as JSON ({\"ok\",\"rows\":[{\"check\",\"result\",\"detail\"}]})."`
}

// Smoke row results: a check passed, failed, or was not made because
// what it needs is missing (the ready token) or another row already names
// the cause (an origin mismatch).
const (
	smokePass = "pass"
	smokeFail = "FAIL"
	smokeSkip = "skip"
)

// smokeRow is one line of the smoke table.
type smokeRow struct {
	Step   string `json:"check"`
	Result string `json:"result"`
	Detail string `json:"detail"`
}

// smokeReport is what --json prints: OK is false when any row failed.
type smokeReport struct {
	OK   bool       `json:"ok"`
	Rows []smokeRow `json:"rows"`
}

// errSmokeFailed: at least one row failed (exit 1).
var errSmokeFailed = errors.New("smoke: at least one check failed")

// Run runs every check in order, prints the table, and cleans up what it
// can (the deployment is ended, its telemetry erased, the key revoked).
func (c *smokeCmd) Run(env *Env) error {
	base, from, err := resolveDaemon(c.URL, c.DataDir)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(c.Env, "smoke-") {
		return Exit(ExitUsage, errors.New("--env must start with smoke- (a clearly synthetic environment)"))
	}
	secrets, _ := datadir.ReadSecrets(filepath.Join(c.DataDir, datadir.SecretsFileName))
	secret := func(k string) string {
		if v := strings.TrimSpace(env.Getenv(k)); v != "" {
			return v
		}
		return secrets[k]
	}
	password := env.Getenv("CHALUPA_CONSOLE_PASSWORD")
	if c.PasswordFile != "" {
		pw, err := ReadPasswordFile(c.PasswordFile)
		if err != nil {
			return Exit(1, err)
		}
		password = pw
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	base = strings.TrimSuffix(base, "/")
	s := &smoke{base: base, env: c.Env, ready: secret("CHALUPA_READY_TOKEN"), password: password,
		admin: &adminapi.Client{BaseURL: base, BaseURLFrom: from, Token: secret("CHALUPA_ADMIN_TOKEN"), HTTP: &http.Client{Timeout: 30 * time.Second}}}
	jar, _ := cookiejar.New(nil)
	s.browser = &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	s.run(ctx)
	failed := false
	for _, r := range s.rows {
		failed = failed || r.Result == smokeFail
	}
	if c.JSON {
		if err := json.NewEncoder(env.Stdout).Encode(smokeReport{OK: !failed, Rows: s.rows}); err != nil {
			return err
		}
	} else {
		tw := table(env.Stdout)
		fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
		for _, r := range s.rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Step, r.Result, r.Detail)
		}
		_ = tw.Flush()
	}
	if failed {
		return Exit(1, errSmokeFailed)
	}
	return nil
}

// smoke is one run's state.
type smoke struct {
	base, env, ready, password string
	admin                      *adminapi.Client
	browser                    *http.Client
	signer                     *protocol.Client
	keyID, deployment          string
	rows                       []smokeRow
	// originMismatch is the daemon's origin when --url is another
	// (empty when they agree or the status could not be read).
	originMismatch string
	// signedOut is set when the login row failed: the rows that need a
	// signed-in console are not checked (the login row names the cause).
	signedOut bool
}

func (s *smoke) add(step string, ok bool, format string, a ...any) bool {
	res := smokePass
	if !ok {
		res = smokeFail
	}
	s.rows = append(s.rows, smokeRow{Step: step, Result: res, Detail: fmt.Sprintf(format, a...)})
	return ok
}

// skip adds a row for a check not made, and why.
func (s *smoke) skip(step, format string, a ...any) {
	s.rows = append(s.rows, smokeRow{Step: step, Result: smokeSkip, Detail: fmt.Sprintf(format, a...)})
}

// skipConsole adds step as skipped when an origin mismatch (named in its
// own row) makes the console refuse the smoke's forms; it reports whether
// it did.
func (s *smoke) skipConsole(step string) bool {
	switch {
	case s.originMismatch != "":
		s.skip(step, "not checked: the origin row names the cause")
	case s.signedOut:
		s.skip(step, "not checked: not signed in (the login row names the cause)")
	default:
		return false
	}
	return true
}

// checkOrigin compares --url with the daemon's public origin
// (CHALUPA_ORIGIN): the console accepts forms only from that origin, so
// localhost against 127.0.0.1 would fail every console row for one cause.
func (s *smoke) checkOrigin(ctx context.Context) {
	st, err := s.admin.GetStatus(ctx)
	if err != nil || st.Origin == "" {
		return
	}
	want := strings.TrimSuffix(st.Origin, "/")
	if strings.EqualFold(want, s.base) {
		s.add("origin", true, "--url is the daemon's origin (CHALUPA_ORIGIN)")
		return
	}
	s.originMismatch = want
	s.add("origin", false, "--url %s is not the daemon's origin %s (CHALUPA_ORIGIN): the console refuses sign-in from another origin; run smoke with --url %s", s.base, want, want)
}

// get sends a GET with an optional bearer and returns status, header and
// body (at most 1 MiB).
func (s *smoke) get(ctx context.Context, path, bearer string) (int, http.Header, string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", s.base+path, nil)
	if err != nil {
		return 0, nil, "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := s.browser.Do(req)
	if err != nil {
		return 0, nil, "", errors.New("no answer")
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, string(b), nil
}

// postForm posts a console form as a same-origin browser does.
func (s *smoke) postForm(ctx context.Context, path string, form url.Values) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", s.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", s.base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := s.browser.Do(req)
	if err != nil {
		return nil, errors.New("no answer")
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp, nil
}

var smokeCSRF = lazyre.New(`name="csrf_token" value="([^"]+)"`)

func (s *smoke) run(ctx context.Context) {
	code, _, body, err := s.get(ctx, "/api/health", "")
	s.add("health", err == nil && code == 200, "GET /api/health: %d %s", code, strings.TrimSpace(body))
	if s.ready == "" {
		// /api/ready answers only its bearer, by design
		// (docs/operations.md, "Health and readiness").
		s.skip("readiness", "no ready token (CHALUPA_READY_TOKEN, or secrets.env in --data-dir): /api/ready answers only its bearer")
	} else {
		code, _, body, err = s.get(ctx, "/api/ready", s.ready)
		s.add("readiness", err == nil && code == 200 && strings.Contains(body, `"ready"`), "GET /api/ready: %d %s", code, strings.TrimSpace(body))
	}
	s.checkOrigin(ctx)
	code, _, _, err = s.get(ctx, "/", "")
	s.add("landing page", err == nil && code == 200, "GET /: %d", code)
	code, h, _, err := s.get(ctx, "/app", "")
	s.add("/app signed out", err == nil && code == http.StatusSeeOther && h.Get("Location") == "/login", "GET /app: %d → %s", code, h.Get("Location"))
	csrf := s.login(ctx)
	if s.setup(ctx) {
		s.ingest(ctx)
		s.runReport(ctx)
		s.views(ctx)
	}
	s.logout(ctx, csrf)
	s.cleanup(ctx)
}

// login signs in and returns the page's CSRF token.
func (s *smoke) login(ctx context.Context) string {
	if s.skipConsole("login") {
		return ""
	}
	_, _, body, err := s.get(ctx, "/login", "")
	m := smokeCSRF.FindStringSubmatch(body)
	if err != nil || m == nil || s.password == "" {
		s.add("login", false, "no login form, or no console password given (CHALUPA_CONSOLE_PASSWORD or --password-file)")
		s.signedOut = true
		return ""
	}
	resp, err := s.postForm(ctx, "/login", url.Values{"password": {s.password}, "csrf_token": {m[1]}})
	if err != nil {
		s.add("login", false, "%v", err)
		s.signedOut = true
		return ""
	}
	var sess *http.Cookie
	for _, ck := range resp.Cookies() {
		if strings.HasSuffix(ck.Name, "chalupa_session") {
			sess = ck
		}
	}
	ok := resp.StatusCode == http.StatusSeeOther && sess != nil && sess.HttpOnly && sess.SameSite == http.SameSiteStrictMode
	s.add("login", ok, "POST /login: %d, session cookie HttpOnly=%v SameSite=Strict=%v", resp.StatusCode,
		sess != nil && sess.HttpOnly, sess != nil && sess.SameSite == http.SameSiteStrictMode)
	// A refused password leaves no session; a cookie without its
	// attributes is a failure of its own, and signed in all the same.
	s.signedOut = resp.StatusCode != http.StatusSeeOther || sess == nil
	_, _, app, _ := s.get(ctx, "/app", "")
	if m := smokeCSRF.FindStringSubmatch(app); m != nil {
		return m[1]
	}
	return ""
}

// setup makes sure the synthetic environment exists and issues it a key.
func (s *smoke) setup(ctx context.Context) bool {
	_, err := s.admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: s.env, Name: "smoke test (synthetic)"})
	var ae *adminapi.APIError
	if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusConflict) {
		return s.add("setup", false, "create environment %s: %v", s.env, err)
	}
	k, err := s.admin.IssueIngestKey(ctx, s.env)
	if err != nil {
		return s.add("setup", false, "issue key: %v", err)
	}
	key, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		return s.add("setup", false, "key material: %v", err)
	}
	s.keyID = k.KeyID
	s.deployment = fmt.Sprintf("smoke-%d", time.Now().UnixNano())
	s.signer = &protocol.Client{BaseURL: s.base, KeyID: k.KeyID, Key: key}
	return true
}

func (s *smoke) ingest(ctx context.Context) {
	now := time.Now().UTC()
	hb, _ := json.Marshal(protocol.HeartbeatV1{EnvironmentSlug: s.env, Deployment: protocol.HeartbeatDeploy{ID: s.deployment},
		AgentVersion: "chalupa-smoke/" + buildinfo.Version, SentAt: now,
		Reaper: protocol.ReaperObservation{LimitMinutes: 60, LastActivityAt: now}})
	req, err := s.signer.NewRequest(ctx, "POST", "/api/ingest/heartbeat", hb, protocol.NewNonce(), now)
	if err != nil {
		s.add("signed heartbeat", false, "%v", err)
		return
	}
	send := func() int {
		r := req.Clone(ctx)
		r.Body = io.NopCloser(strings.NewReader(string(hb)))
		resp, err := s.browser.Do(r)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	code := send()
	s.add("signed heartbeat", code >= 200 && code < 300, "POST /api/ingest/heartbeat: %d", code)
	code = send()
	s.add("replayed nonce", code == http.StatusConflict, "the same signed request again: %d", code)

	w := protocol.WindowV1{EnvironmentSlug: s.env, DeploymentID: s.deployment, SessionID: "smoke-session",
		WindowStart: now.Truncate(time.Minute).Add(-2 * time.Minute), WindowSeconds: 60,
		Metrics: protocol.MetricsV1{CPUPct: &protocol.PercentAggV1{N: 12, Sum: 120, Min: 5, Max: 15, Last: 10}}}
	post := func(w protocol.WindowV1) (int, string) {
		b, _ := json.Marshal(w)
		r, err := s.signer.Post(ctx, "/api/ingest/telemetry", b)
		if err != nil {
			return 0, ""
		}
		return r.Status, string(r.Body)
	}
	code, body := post(w)
	s.add("signed Monitor window", code == http.StatusAccepted && strings.Contains(body, `"deduplicated":false`),
		"POST /api/ingest/telemetry: %d %s", code, strings.TrimSpace(body))
	code, body = post(w)
	s.add("exact window retry", code == http.StatusAccepted && strings.Contains(body, `"deduplicated":true`), "%d %s", code, strings.TrimSpace(body))
	w.Metrics.CPUPct.Last = 11
	code, body = post(w)
	s.add("changed window retry", code == http.StatusConflict, "%d %s", code, strings.TrimSpace(body))
}

// runReport reports a CI run with one artifact for the synthetic
// deployment, signed like the agent's report, and checks that the admin
// API lists it with its artifact and that the environment's console page
// shows both.
func (s *smoke) runReport(ctx context.Context) {
	const row = "run with artifact"
	now := time.Now().UTC()
	runID := "smoke-run-" + strings.TrimPrefix(s.deployment, "smoke-")
	artifact := "smoke-report.txt"
	rep := protocol.RunReportV1{EnvironmentSlug: s.env, DeploymentID: s.deployment, RunID: runID, Suite: "smoke",
		Status: "passed", StartedAt: now.Add(-time.Second), FinishedAt: now,
		Artifacts: []protocol.ArtifactRefV1{{V: 1, Name: artifact, MediaType: "text/plain", SizeBytes: 5,
			SHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", Locator: protocol.LocalLocator("smoke-artifact-1")}}}
	b, _ := json.Marshal(rep)
	r, err := s.signer.Post(ctx, "/api/ingest/runs", b)
	if err != nil || r.Status != http.StatusAccepted {
		status := 0
		if r != nil {
			status = r.Status
		}
		s.add(row, false, "POST /api/ingest/runs: %d", status)
		return
	}
	listed := false
	if l, err := s.admin.ListRuns(ctx, s.env); err == nil {
		for _, x := range l.Runs {
			listed = listed || (x.RunID == runID && len(x.Artifacts) == 1 && x.Artifacts[0].Name == artifact)
		}
	}
	if s.originMismatch != "" {
		s.add(row, listed, "POST /api/ingest/runs: 202; %s with its artifact listed by the admin API: %v; the console page not checked (origin)", runID, listed)
		return
	}
	if s.signedOut {
		s.add(row, listed, "POST /api/ingest/runs: 202; %s with its artifact listed by the admin API: %v; the console page not checked (not signed in)", runID, listed)
		return
	}
	code, _, page, _ := s.get(ctx, "/app/env/"+s.env, "")
	shown := code == http.StatusOK && strings.Contains(page, runID) && strings.Contains(page, artifact)
	s.add(row, listed && shown, "POST /api/ingest/runs: 202; %s with its artifact listed by the admin API: %v, on the console's environment page: %v",
		runID, listed, shown)
}

func (s *smoke) views(ctx context.Context) {
	f, err := s.admin.ListFleet(ctx)
	found := false
	if err == nil {
		for _, e := range f.Environments {
			for _, d := range e.Deployments {
				found = found || (e.Slug == s.env && d.ID == s.deployment && time.Since(d.LastHeartbeatAt) < 5*time.Minute)
			}
		}
	}
	s.add("fleet", found, "%s/%s listed with a fresh heartbeat: %v", s.env, s.deployment, found)
	p, err := s.admin.GetDeploymentPerformance(ctx, adminapi.DeploymentPerformanceRequest{EnvironmentSlug: s.env, DeploymentID: s.deployment,
		From: time.Now().Add(-time.Hour), Step: time.Minute})
	points := 0
	if err == nil && p.DeploymentID == s.deployment {
		for _, sr := range p.Series {
			if sr.Metric == "cpuPct" {
				points = len(sr.Points)
			}
		}
	}
	s.add("performance", points == 1, "cpuPct points for %s in the last hour: %d", s.deployment, points)
	if s.skipConsole("console deployment page") {
		return
	}
	code, _, _, _ := s.get(ctx, "/app/env/"+s.env+"/deployments/"+s.deployment, "")
	s.add("console deployment page", code == 200, "GET /app/env/%s/deployments/%s: %d", s.env, s.deployment, code)
}

func (s *smoke) logout(ctx context.Context, csrf string) {
	if s.skipConsole("logout") {
		return
	}
	resp, err := s.postForm(ctx, "/logout", url.Values{"csrf_token": {csrf}})
	code, h, _, err2 := s.get(ctx, "/app", "")
	ok := err == nil && err2 == nil && resp.StatusCode == http.StatusSeeOther && code == http.StatusSeeOther && h.Get("Location") == "/login"
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	s.add("logout", ok, "POST /logout: %d; then GET /app: %d → %s", status, code, h.Get("Location"))
}

// cleanup ends the synthetic deployment, erases the environment's
// telemetry and revokes the key; a failure is a row of its own.
func (s *smoke) cleanup(ctx context.Context) {
	if s.keyID == "" {
		return
	}
	var problems []string
	if _, err := s.admin.EndDeployment(ctx, s.env, s.deployment); err != nil {
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
			problems = append(problems, "end deployment")
		}
	}
	if _, err := s.admin.EraseTelemetry(ctx, adminapi.EraseTelemetryRequest{EnvironmentSlug: s.env,
		Confirmation: adminapi.EraseTelemetryPhrase(s.env)}); err != nil {
		problems = append(problems, "erase telemetry")
	}
	if _, err := s.admin.RevokeIngestKey(ctx, s.keyID); err != nil {
		problems = append(problems, "revoke key")
	}
	s.add("cleanup", len(problems) == 0, "ended %s, erased %s's telemetry, revoked its key%s", s.deployment, s.env,
		map[bool]string{true: "", false: "; failed: " + strings.Join(problems, ", ")}[len(problems) == 0])
}
