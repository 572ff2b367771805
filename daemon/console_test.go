package daemon_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/argon2"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/console"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/jobs/jobstest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

const consolePassword = "correct horse battery staple"

// consoleClient is a browser-like client of an in-process daemon: a cookie
// jar, no redirects followed, and the daemon's configured origin.
type consoleClient struct {
	p      *daemontest.InProcess
	hc     *http.Client
	origin string
	xff    string
}

func newConsoleClient(t *testing.T, p *daemontest.InProcess) *consoleClient {
	jar, _ := cookiejar.New(nil)
	return &consoleClient{p: p, origin: "http://" + p.Env["CHALUPA_LISTEN"],
		hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfRE = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// get fetches path and returns the response and body.
func (c *consoleClient) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	resp, err := c.hc.Get(c.p.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// post sends a form as a same-origin browser would (Origin and
// Sec-Fetch-Site set), unless hdr overrides them.
func (c *consoleClient) post(t *testing.T, path string, form url.Values, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", c.p.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.origin)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if c.xff != "" {
		req.Header.Set("X-Forwarded-For", c.xff)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// login loads the login form and posts password; it returns the answer.
func (c *consoleClient) login(t *testing.T, password string) *http.Response {
	t.Helper()
	_, body := c.get(t, "/login")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("login form has no csrf_token:\n%s", body)
	}
	resp, _ := c.post(t, "/login", url.Values{"password": {password}, "csrf_token": {m[1]}}, nil)
	return resp
}

func setPassword(t *testing.T, p *daemontest.InProcess) {
	t.Helper()
	if _, err := p.Admin.SetConsolePassword(context.Background(), adminapi.SetConsolePasswordRequest{Password: consolePassword}); err != nil {
		t.Fatal(err)
	}
}

// setCheapPassword stores consolePassword's argon2id hash made with the
// smallest parameters argon2id takes (8 KiB, one pass) straight into the
// database, as the admin API stores its own (storage.SetConsolePassword).
// A stored hash carries its parameters, so every login still runs the real
// verification (console.VerifyPassword), in microseconds instead of the
// production hash's tens of milliseconds, which -race makes a quarter of a
// second: for a test that signs in dozens of times and is about the rate
// limit, not the hash (console's own tests cover the hash, and
// setPassword the admin API's path).
func setCheapPassword(t *testing.T, p *daemontest.InProcess) {
	t.Helper()
	salt := []byte("sixteen byte slt")
	key := argon2.IDKey([]byte(consolePassword), salt, 1, 8, 1, 32)
	hash := fmt.Sprintf("$argon2id$v=%d$m=8,t=1,p=1$%s$%s", argon2.Version,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
	if !console.VerifyPassword(hash, consolePassword) || console.VerifyPassword(hash, "wrong") {
		t.Fatal("the cheap hash does not verify as a stored hash")
	}
	ctx := context.Background()
	if err := p.App.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.SetConsolePassword(ctx, tx, hash, p.App.Clock.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleLoginRateLimit: ten failures from one source lock it out for
// the window, the right password included, with Retry-After; other
// sources still sign in; fifty failures across sources lock everyone out;
// successes are not counted; the lock survives a restart; it lifts when
// the window passes (docs/operations.md, "Console").
func TestConsoleLoginRateLimit(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now().UTC().Truncate(time.Second))
	opt := daemontest.AppOptions{Clock: clock, Env: map[string]string{"CHALUPA_TRUSTED_PROXIES": "127.0.0.1"}}
	p := daemontest.NewInProcess(t, opt)
	setCheapPassword(t, p)
	from := func(addr string) *consoleClient {
		c := newConsoleClient(t, p)
		c.xff = addr
		return c
	}

	t.Run("successes are not counted", func(t *testing.T) {
		for i := 0; i < console.LoginFailuresPerSource+2; i++ {
			if r := from("198.51.100.7").login(t, consolePassword); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/app" {
				t.Fatalf("success %d: %d %s", i, r.StatusCode, r.Header.Get("Location"))
			}
		}
	})
	a := from("203.0.113.1")
	t.Run("ten failures then the right password is refused", func(t *testing.T) {
		for i := 0; i < console.LoginFailuresPerSource; i++ {
			if r := a.login(t, "wrong password "+strconv.Itoa(i)); r.StatusCode != http.StatusUnauthorized {
				t.Fatalf("failure %d: %d, want 401", i, r.StatusCode)
			}
		}
		r := a.login(t, consolePassword)
		if r.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("11th attempt (right password): %d, want 429", r.StatusCode)
		}
		if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 590 || ra > 600 {
			t.Fatalf("Retry-After %q, want about 600", r.Header.Get("Retry-After"))
		}
		if r := from("203.0.113.2").login(t, consolePassword); r.StatusCode != http.StatusSeeOther {
			t.Fatalf("another source: %d, want 303", r.StatusCode)
		}
	})
	t.Run("X-Forwarded-For is ignored from an untrusted peer", func(t *testing.T) {
		q := daemontest.NewInProcess(t, daemontest.AppOptions{})
		setCheapPassword(t, q)
		for i := 0; i < console.LoginFailuresPerSource; i++ {
			c := newConsoleClient(t, q)
			c.xff = "192.0.2." + strconv.Itoa(i+1)
			c.login(t, "wrong")
		}
		c := newConsoleClient(t, q)
		c.xff = "192.0.2.200"
		if r := c.login(t, consolePassword); r.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("spoofed X-Forwarded-For counted as new sources: %d, want 429", r.StatusCode)
		}
	})
	t.Run("holds across a restart", func(t *testing.T) {
		p.Restart(opt)
		a.p = p
		if r := a.login(t, consolePassword); r.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("after restart: %d, want 429", r.StatusCode)
		}
	})
	t.Run("lifts when the window passes", func(t *testing.T) {
		clock.Advance(console.LoginWindow + time.Second)
		if r := a.login(t, consolePassword); r.StatusCode != http.StatusSeeOther {
			t.Fatalf("after the window: %d, want 303", r.StatusCode)
		}
	})
	t.Run("fifty across sources lock everyone", func(t *testing.T) {
		for i := 0; i < console.LoginFailuresFleet; i++ {
			c := from("198.18." + strconv.Itoa(i/5) + "." + strconv.Itoa(i%5+1))
			if r := c.login(t, "wrong"); r.StatusCode != http.StatusUnauthorized {
				t.Fatalf("failure %d: %d, want 401", i, r.StatusCode)
			}
		}
		if r := from("198.19.0.1").login(t, consolePassword); r.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a fresh source after 50 fleet-wide: %d, want 429", r.StatusCode)
		}
	})
}

// TestConsoleSessionAndCSRF: the session cookie's flags; /app needs it; a
// cross-site or token-less form post is refused and changes nothing; the
// admin API refuses the cookie; logout ends the session.
func TestConsoleSessionAndCSRF(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	setPassword(t, p)
	c := newConsoleClient(t, p)
	if r, _ := c.get(t, "/app"); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/login" {
		t.Fatalf("/app signed out: %d %s", r.StatusCode, r.Header.Get("Location"))
	}
	t.Run("login refuses a cross-site post", func(t *testing.T) {
		_, body := c.get(t, "/login")
		tok := csrfRE.FindStringSubmatch(body)[1]
		for name, hdr := range map[string]map[string]string{
			"other origin":   {"Origin": "https://evil.example"},
			"no origin":      {"Origin": ""},
			"cross-site":     {"Sec-Fetch-Site": "cross-site"},
			"same-site only": {"Sec-Fetch-Site": "same-site"},
		} {
			if r, _ := c.post(t, "/login", url.Values{"password": {consolePassword}, "csrf_token": {tok}}, hdr); r.StatusCode != http.StatusForbidden {
				t.Errorf("%s: %d, want 403", name, r.StatusCode)
			}
		}
		if r, _ := c.post(t, "/login", url.Values{"password": {consolePassword}, "csrf_token": {"forged"}}, nil); r.StatusCode != http.StatusForbidden {
			t.Errorf("wrong token: %d, want 403", r.StatusCode)
		}
	})
	r := c.login(t, consolePassword)
	var sess *http.Cookie
	for _, ck := range r.Cookies() {
		if ck.Name == "chalupa_session" {
			sess = ck
		}
	}
	t.Run("cookie flags", func(t *testing.T) {
		if sess == nil {
			t.Fatalf("no session cookie in %v", r.Header.Values("Set-Cookie"))
		}
		if !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/" || len(sess.Value) < 43 {
			t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, 256-bit value", sess)
		}
		if sess.Secure {
			t.Fatal("Secure on a loopback http origin: the browser would drop it")
		}
	})
	_, fleet := c.get(t, "/app")
	tok := csrfRE.FindStringSubmatch(fleet)
	if tok == nil {
		t.Fatalf("fleet page has no logout form:\n%s", fleet)
	}
	t.Run("admin API refuses the cookie", func(t *testing.T) {
		resp, _ := c.get(t, "/api/admin/fleet")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("admin API with the session cookie: %d, want 401", resp.StatusCode)
		}
	})
	t.Run("cross-site logout refused", func(t *testing.T) {
		if r, _ := c.post(t, "/logout", url.Values{"csrf_token": {tok[1]}}, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); r.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-site logout: %d, want 403", r.StatusCode)
		}
		if r, _ := c.post(t, "/logout", url.Values{}, nil); r.StatusCode != http.StatusForbidden {
			t.Fatalf("logout without csrf_token: %d, want 403", r.StatusCode)
		}
		if r, _ := c.get(t, "/app"); r.StatusCode != http.StatusOK {
			t.Fatalf("a refused logout ended the session: /app %d", r.StatusCode)
		}
	})
	t.Run("logout", func(t *testing.T) {
		if r, _ := c.post(t, "/logout", url.Values{"csrf_token": {tok[1]}}, nil); r.StatusCode != http.StatusSeeOther {
			t.Fatalf("logout: %d", r.StatusCode)
		}
		// The old cookie value no longer opens anything.
		req, _ := http.NewRequest("GET", p.URL+"/app", nil)
		req.AddCookie(&http.Cookie{Name: sess.Name, Value: sess.Value})
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("/app with the logged-out cookie: %d, want 303", resp.StatusCode)
		}
	})
}

// TestConsoleSessionExpiry: a session ends after SessionIdleTimeout without
// a request, counted from its last request, not from sign-in; and after
// SessionAbsoluteTimeout however busy it is; either way /app sends the
// browser back to /login (docs/operations.md, "Console").
func TestConsoleSessionExpiry(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now().UTC().Truncate(time.Second))
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clock})
	setPassword(t, p)
	signedIn := func(c *consoleClient) bool {
		t.Helper()
		r, _ := c.get(t, "/app")
		switch {
		case r.StatusCode == http.StatusOK:
			return true
		case r.StatusCode == http.StatusSeeOther && r.Header.Get("Location") == "/login":
			return false
		}
		t.Fatalf("/app: %d %s", r.StatusCode, r.Header.Get("Location"))
		return false
	}
	t.Run("idle", func(t *testing.T) {
		c := newConsoleClient(t, p)
		if r := c.login(t, consolePassword); r.StatusCode != http.StatusSeeOther {
			t.Fatalf("login: %d", r.StatusCode)
		}
		// Two requests each just inside the idle timeout: the second
		// is past it counted from sign-in, so the first moved it on.
		for i := 0; i < 2; i++ {
			clock.Advance(console.SessionIdleTimeout - time.Second)
			if !signedIn(c) {
				t.Fatalf("request %d, %s after the previous one: signed out", i+1, console.SessionIdleTimeout-time.Second)
			}
		}
		clock.Advance(console.SessionIdleTimeout)
		if signedIn(c) {
			t.Fatalf("still signed in after %s without a request", console.SessionIdleTimeout)
		}
	})
	t.Run("absolute", func(t *testing.T) {
		c := newConsoleClient(t, p)
		if r := c.login(t, consolePassword); r.StatusCode != http.StatusSeeOther {
			t.Fatalf("login: %d", r.StatusCode)
		}
		const every = 50 * time.Minute // inside the idle timeout
		var elapsed time.Duration
		for elapsed+every < console.SessionAbsoluteTimeout {
			clock.Advance(every)
			elapsed += every
			if !signedIn(c) {
				t.Fatalf("signed out %s after sign-in, requests every %s", elapsed, every)
			}
		}
		clock.Advance(console.SessionAbsoluteTimeout - elapsed)
		if signedIn(c) {
			t.Fatalf("still signed in %s after sign-in", console.SessionAbsoluteTimeout)
		}
	})
}

// TestConsoleHeaders: every console page and API answer carries the
// security headers and noindex; robots.txt disallows /app and the APIs.
func TestConsoleHeaders(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	setPassword(t, p)
	c := newConsoleClient(t, p)
	if r := c.login(t, consolePassword); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", r.StatusCode)
	}
	if _, err := p.Admin.CreateEnvironment(context.Background(), adminapi.CreateEnvironmentRequest{Slug: "harbor"}); err != nil {
		t.Fatal(err)
	}
	e := storagetest.Environment(t, p.App.DB, storage.Environment{Slug: "sunk-one"})
	storagetest.EndDeployment(t, p.App.DB, e.ID, storagetest.Deployment(t, p.App.DB, storage.Deployment{EnvironmentID: e.ID}).ID, time.Now())
	storagetest.Deployment(t, p.App.DB, storage.Deployment{EnvironmentID: e.ID, ID: "dep-live"})
	storagetest.Box(t, p.App.DB, storage.Box{Name: "box-h", EnvironmentSlug: "harbor"})
	pages := []string{"/", "/login", "/app", "/app/events", "/app/costs", "/app/env/harbor", "/app/env/sunk-one",
		"/app/oracle?tab=cache", "/app/boxes/box-h",
		"/app/env/sunk-one/deployments/dep-live", "/app/env/sunk-one/deployments/dep-live?range=30d", "/app/env/nope"}
	for _, path := range pages {
		t.Run(path, func(t *testing.T) {
			cl := c
			if path == "/login" {
				cl = newConsoleClient(t, p) // signed in, /login redirects
			}
			r, body := cl.get(t, path)
			if want := map[bool]int{true: http.StatusNotFound, false: http.StatusOK}[path == "/app/env/nope"]; r.StatusCode != want {
				t.Errorf("status %d, want %d", r.StatusCode, want)
			}
			// Signed in, every /app page shows the build version; the
			// public pages (/ and /login) show neither it nor the replica
			// type.
			public := path == "/" || path == "/login"
			if got := strings.Contains(body, `id="version"`) || strings.Contains(body, "replica "); got == public {
				t.Errorf("build version and replica shown %v on %s", got, path)
			}
			for k, want := range map[string]string{
				"Content-Security-Policy": console.ContentSecurityPolicy,
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "same-origin",
				"X-Robots-Tag":            "noindex, nofollow",
			} {
				if got := r.Header.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if !strings.Contains(console.ContentSecurityPolicy, "frame-ancestors 'none'") || strings.Contains(console.ContentSecurityPolicy, "unsafe-inline") {
				t.Errorf("CSP is not strict: %s", console.ContentSecurityPolicy)
			}
			if strings.Contains(body, "<script") {
				t.Errorf("page has a script")
			}
		})
	}
	for _, path := range []string{"/api/health", "/api/admin/fleet", "/api/ingest/heartbeat"} {
		t.Run("api "+path, func(t *testing.T) {
			r, _ := c.get(t, path)
			if got := r.Header.Get("X-Robots-Tag"); !strings.Contains(got, "noindex") {
				t.Errorf("X-Robots-Tag = %q", got)
			}
		})
	}
	// Answers the router gives itself, and the static directory, carry the
	// same headers; the directory is not listed.
	for _, path := range []string{"/app/nope", "/nope", "/static/"} {
		t.Run("not found "+path, func(t *testing.T) {
			r, body := c.get(t, path)
			if r.StatusCode != http.StatusNotFound {
				t.Errorf("status %d, want 404: %.200s", r.StatusCode, body)
			}
			for _, k := range []string{"Content-Security-Policy", "X-Content-Type-Options", "X-Robots-Tag"} {
				if r.Header.Get(k) == "" {
					t.Errorf("no %s", k)
				}
			}
			if strings.Contains(body, `href="style.css"`) {
				t.Errorf("lists the static files: %.200s", body)
			}
		})
	}
	t.Run("robots.txt", func(t *testing.T) {
		_, body := c.get(t, "/robots.txt")
		for _, want := range []string{"Disallow: /app", "Disallow: /api/"} {
			if !strings.Contains(body, want) {
				t.Errorf("robots.txt lacks %q:\n%s", want, body)
			}
		}
	})
}

// TestConsoleConvergeForms: the box page's forms enqueue through the job
// service the admin API uses: a preview redirects to its job page (which
// reloads itself while the job is live and shows its progress), a busy
// box is refused 409 naming the live job, a destroy with a wrong phrase
// or a cross-site post is refused and enqueues nothing, the right phrase
// enqueues it; without an executor the page says converge is not
// configured and a post enqueues nothing (docs/operations.md, "Console").
func TestConsoleConvergeForms(t *testing.T) {
	exec := &jobstest.Executor{Gate: make(chan struct{}), Progress: []jobs.Progress{{Message: "box-web-compute create droplet"}}}
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Executor: exec, StartLoops: true})
	setPassword(t, p)
	ctx := context.Background()
	newEnv(t, p.Admin, "demo")
	if _, err := p.Admin.CreateBox(ctx, validBox("box-web", "demo")); err != nil {
		t.Fatal(err)
	}
	c := newConsoleClient(t, p)
	if r := c.login(t, consolePassword); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", r.StatusCode)
	}
	_, page := c.get(t, "/app/boxes/box-web")
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("box page has no csrf_token:\n%s", page)
	}
	csrf := m[1]
	jobCount := func() int {
		t.Helper()
		l, err := p.Admin.ListJobs(ctx, adminapi.ListJobsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Jobs)
	}
	post := func(form url.Values, hdr map[string]string) (*http.Response, string) {
		return c.post(t, "/app/boxes/box-web/converge", form, hdr)
	}

	t.Run("cross-site post refused", func(t *testing.T) {
		r, _ := post(url.Values{"csrf_token": {csrf}, "action": {"preview"}}, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
		if r.StatusCode != http.StatusForbidden || jobCount() != 0 {
			t.Fatalf("got %d with %d job(s), want 403 and none", r.StatusCode, jobCount())
		}
		if r, _ := post(url.Values{"csrf_token": {"not-the-token"}, "action": {"preview"}}, nil); r.StatusCode != http.StatusForbidden || jobCount() != 0 {
			t.Fatalf("wrong token: %d with %d job(s)", r.StatusCode, jobCount())
		}
	})
	t.Run("destroy with a wrong phrase refused", func(t *testing.T) {
		for _, phrase := range []string{"", "destroy", "destroy box-other", "DESTROY box-web"} {
			r, body := post(url.Values{"csrf_token": {csrf}, "action": {"destroy"}, "confirmation": {phrase}}, nil)
			if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "confirmation did not match") || jobCount() != 0 {
				t.Fatalf("phrase %q: %d with %d job(s), want 422 and none", phrase, r.StatusCode, jobCount())
			}
		}
	})
	var jobURL string
	t.Run("preview enqueues and shows the job", func(t *testing.T) {
		r, _ := post(url.Values{"csrf_token": {csrf}, "action": {"preview"}}, nil)
		jobURL = r.Header.Get("Location")
		if r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(jobURL, "/app/jobs/") || jobCount() != 1 {
			t.Fatalf("got %d → %q with %d job(s)", r.StatusCode, jobURL, jobCount())
		}
		id := strings.TrimPrefix(jobURL, "/app/jobs/")
		var body string
		// The fake executor reports progress, then waits at its gate.
		testwait.Eventually(t, testwait.Short, "the job page to show the progress report", func() (bool, string) {
			_, body = c.get(t, jobURL)
			return strings.Contains(body, "box-web-compute create droplet"), body
		})
		if !strings.Contains(body, `http-equiv="refresh"`) || !strings.Contains(body, id) || !strings.Contains(body, "running") {
			t.Fatalf("live job page lacks its refresh, id or status:\n%s", body)
		}
		_, oracle := c.get(t, "/app/oracle?tab=cache")
		if !strings.Contains(oracle, "<strong>held</strong> by job <a href=\"/app/jobs/"+id) {
			t.Fatalf("the oracle does not show box-web's lock held by %s:\n%s", id, oracle)
		}
	})
	t.Run("busy box refused with the live job", func(t *testing.T) {
		r, body := post(url.Values{"csrf_token": {csrf}, "action": {"up"}}, nil)
		if r.StatusCode != http.StatusConflict || !strings.Contains(body, jobURL) || jobCount() != 1 {
			t.Fatalf("got %d with %d job(s), want 409 naming %s", r.StatusCode, jobCount(), jobURL)
		}
	})
	t.Run("finished job stops reloading", func(t *testing.T) {
		exec.Gate <- struct{}{}
		var body string
		testwait.Eventually(t, testwait.Short, "the job page to show the job succeeded", func() (bool, string) {
			_, body = c.get(t, jobURL)
			return strings.Contains(body, "succeeded"), body
		})
		if strings.Contains(body, `http-equiv="refresh"`) {
			t.Fatalf("a finished job's page still reloads:\n%s", body)
		}
	})
	t.Run("destroy with the phrase enqueues", func(t *testing.T) {
		r, _ := post(url.Values{"csrf_token": {csrf}, "action": {"destroy"}, "confirmation": {adminapi.ConvergePhrase("destroy", "box-web")}}, nil)
		if r.StatusCode != http.StatusSeeOther || jobCount() != 2 {
			t.Fatalf("got %d with %d job(s), want 303 and 2", r.StatusCode, jobCount())
		}
		exec.Gate <- struct{}{}
	})
	t.Run("destroy with the data volume", func(t *testing.T) {
		testwait.Eventually(t, testwait.Short, "the destroy above to end", func() (bool, string) {
			l, err := p.Admin.ListJobs(ctx, adminapi.ListJobsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			live := false
			for _, j := range l.Jobs {
				live = live || j.Status == storage.JobQueued || j.Status == storage.JobRunning
			}
			return !live, fmt.Sprintf("%+v", l.Jobs)
		})
		phrase := adminapi.ConvergePhrase("destroy", "box-web")
		for _, tc := range []struct {
			name string
			form url.Values
			want string
		}{
			{"include data without its phrase", url.Values{"include_data": {"1"}}, "data confirmation did not match"},
			{"include data with the compute phrase", url.Values{"include_data": {"1"}, "data_confirmation": {phrase}}, "data confirmation did not match"},
			{"the data phrase without include data", url.Values{"data_confirmation": {adminapi.DestroyDataPhrase("box-web")}}, "is not ticked"},
		} {
			tc.form.Set("csrf_token", csrf)
			tc.form.Set("action", "destroy")
			tc.form.Set("confirmation", phrase)
			r, body := post(tc.form, nil)
			if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, tc.want) || jobCount() != 2 {
				t.Fatalf("%s: %d with %d job(s), want 422 %q and none new", tc.name, r.StatusCode, jobCount(), tc.want)
			}
		}
		r, _ := post(url.Values{"csrf_token": {csrf}, "action": {"destroy"}, "confirmation": {phrase},
			"include_data": {"1"}, "data_confirmation": {adminapi.DestroyDataPhrase("box-web")}}, nil)
		if r.StatusCode != http.StatusSeeOther || jobCount() != 3 {
			t.Fatalf("got %d with %d job(s), want 303 and 3", r.StatusCode, jobCount())
		}
		j, err := p.Admin.GetJob(ctx, strings.TrimPrefix(r.Header.Get("Location"), "/app/jobs/"))
		if err != nil || !j.IncludeData || j.Action != "destroy" {
			t.Fatalf("the job %+v (%v) is not a destroy that includes the data", j, err)
		}
		if _, page := c.get(t, r.Header.Get("Location")); !strings.Contains(page, "<h1>Job destroy with data on ") {
			t.Errorf("the job page does not say the data goes too:\n%s", page)
		}
		exec.Gate <- struct{}{}
	})

	t.Run("not configured", func(t *testing.T) {
		q := daemontest.NewInProcess(t, daemontest.AppOptions{})
		setPassword(t, q)
		newEnv(t, q.Admin, "demo")
		if _, err := q.Admin.CreateBox(ctx, validBox("box-off", "demo")); err != nil {
			t.Fatal(err)
		}
		qc := newConsoleClient(t, q)
		qc.login(t, consolePassword)
		_, page := qc.get(t, "/app/boxes/box-off")
		if !strings.Contains(page, "Converge is not configured") {
			t.Fatalf("the box page does not say converge is not configured:\n%s", page)
		}
		tok := csrfRE.FindStringSubmatch(page)[1]
		r, body := qc.post(t, "/app/boxes/box-off/converge", url.Values{"csrf_token": {tok}, "action": {"preview"}}, nil)
		if l, _ := q.Admin.ListJobs(ctx, adminapi.ListJobsRequest{}); r.StatusCode != http.StatusServiceUnavailable || len(l.Jobs) != 0 ||
			!strings.Contains(body, "converge is not configured") {
			t.Fatalf("got %d with %d job(s), want 503 and none", r.StatusCode, len(l.Jobs))
		}
	})
}

// TestConsoleHTMLErrorsAndHEAD: in the console a 404 or 405 is an HTML
// page with the console's headers, not the API's JSON (an unknown path
// too, when a browser asks for HTML); the APIs keep JSON. HEAD is answered
// like GET without a body: signed in 200, signed out 303 to /login.
func TestConsoleHTMLErrorsAndHEAD(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	setPassword(t, p)
	c := newConsoleClient(t, p)
	if r := c.login(t, consolePassword); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", r.StatusCode)
	}
	do := func(t *testing.T, cl *consoleClient, method, path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, p.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := cl.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	browser := map[string]string{"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
		status             int
		html               bool
	}{
		{"console path", "GET", "/app/nope/deeper", nil, http.StatusNotFound, true},
		{"unknown path, browser", "GET", "/nope", browser, http.StatusNotFound, true},
		{"unknown path, API client", "GET", "/nope", nil, http.StatusNotFound, false},
		{"API path, browser", "GET", "/api/admin/nope", browser, http.StatusNotFound, false},
		{"wrong method on a page", "POST", "/app/events", nil, http.StatusMethodNotAllowed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, body := do(t, c, tc.method, tc.path, tc.hdr)
			if r.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", r.StatusCode, tc.status)
			}
			isHTML := strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") && strings.Contains(body, "<!doctype html>")
			if isHTML != tc.html {
				t.Fatalf("HTML %v, want %v (%s):\n%.300s", isHTML, tc.html, r.Header.Get("Content-Type"), body)
			}
			if tc.html {
				if !strings.Contains(body, "<h1>Not found</h1>") && !strings.Contains(body, "<h1>Method not allowed</h1>") || strings.Contains(body, `"code"`) {
					t.Errorf("not an error page:\n%.500s", body)
				}
				if r.Header.Get("Content-Security-Policy") != console.ContentSecurityPolicy {
					t.Error("no CSP on the error page")
				}
			}
			if tc.status == http.StatusMethodNotAllowed && r.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow %q, want GET, HEAD", r.Header.Get("Allow"))
			}
		})
	}
	for _, tc := range []struct {
		name, path string
		signedIn   bool
		status     int
	}{
		{"fleet signed in", "/app", true, http.StatusOK},
		{"fleet signed out", "/app", false, http.StatusSeeOther},
		{"landing", "/", false, http.StatusOK},
		{"stylesheet", "/static/style.css", false, http.StatusOK},
		{"getting started, public", "/getting-started", false, http.StatusOK},
	} {
		t.Run("HEAD "+tc.name, func(t *testing.T) {
			cl := c
			if !tc.signedIn {
				cl = newConsoleClient(t, p)
			}
			r, body := do(t, cl, "HEAD", tc.path, nil)
			if r.StatusCode != tc.status || body != "" {
				t.Fatalf("HEAD %s: %d with %d body bytes, want %d and none", tc.path, r.StatusCode, len(body), tc.status)
			}
			if g, _ := do(t, cl, "GET", tc.path, nil); g.Header.Get("Content-Type") != r.Header.Get("Content-Type") {
				t.Errorf("HEAD Content-Type %q, GET's %q", r.Header.Get("Content-Type"), g.Header.Get("Content-Type"))
			}
		})
	}
}
