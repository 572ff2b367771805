package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/pulumiexec"
)

// TestConsoleInChromium drives the built binary's console in Debian's
// headless Chromium: /app sends a stranger to login; sign in; the fleet;
// an environment whose deployment has 40 minutes of telemetry; its charts
// with one vertex per point, axes with tick labels, and under the pointer
// hovering a point that point's <title> (its time and value with the
// unit); events (an ended deployment's); costs; the box's Settings → Pulumi,
// whose preview form enqueues a job (the real pulumi CLI with the test
// provider) and whose destroy form refuses a wrong phrase enqueuing
// nothing; the oracle; every page at phone width (390 px: no sideways
// scrolling, every input labelled, the skip link first in focus order);
// sign out; /app redirects again. A screenshot of each page is written
// under the test's artifact directory (go test -artifacts keeps them).
func TestConsoleInChromium(t *testing.T) {
	t.Parallel()
	chromium := proctest.Chromium(t)
	bin := proctest.BuildBinary(t)
	// Converge runs with the real pulumi CLI and the test provider against
	// the DigitalOcean API test server, as in the converge end-to-end test.
	cli := proctest.ToolPath(t, "pulumi")
	api := dofake.New(t)
	api.AddTokenValue("provision", convergeE2EToken, dofake.FullAccess...)
	env := proctest.AgentRelease() // boxes carry the agent (docs/operations.md, "Converge")
	for k, v := range map[string]string{"DIGITALOCEAN_PROVISION_TOKEN": convergeE2EToken, "CHALUPA_DO_API_URL": api.URL,
		"CHALUPA_PULUMI_CLI": cli, "PULUMI_HOME": proctest.PulumiHome(t, cli, pulumiexec.ProviderVersion)} {
		env[k] = v
	}
	d := proctest.StartDaemon(t, bin, env)

	const password = "a console password for the browser test"
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ingestE2ECLI(t, bin, d, "admin", "password", "--password-file", pwFile)
	ingestE2ECLI(t, bin, d, "admin", "env", "create", "demo-harbor")
	keyDir := filepath.Join(t.TempDir(), "agent")
	ingestE2ECLI(t, bin, d, "admin", "keys", "issue", "demo-harbor", "--out", keyDir)
	idBytes, err := os.ReadFile(filepath.Join(keyDir, "key-id"))
	if err != nil {
		t.Fatal(err)
	}
	keyID := strings.TrimSpace(string(idBytes))
	material, err := os.ReadFile(filepath.Join(keyDir, "ingest.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := protocol.DecodeKeyMaterial(string(material))
	if err != nil {
		t.Fatal(err)
	}
	if out, code := proctest.RunCommand(t, bin, "", nil, "agent", "heartbeat", "--url", d.URL, "--key-id", keyID,
		"--key-file", filepath.Join(keyDir, "ingest.key"), "--env", "demo-harbor", "--deployment", "dep-web"); code != 0 {
		t.Fatalf("agent heartbeat exited %d:\n%s", code, out)
	}
	cl := &protocol.Client{BaseURL: d.URL, KeyID: keyID, Key: key, HTTP: &http.Client{Timeout: 30 * time.Second}}
	// 40 one-minute windows ending two minutes ago: 40 points at the 1h
	// range's one-minute step.
	const windows = 40
	first := time.Now().UTC().Truncate(time.Minute).Add(-(windows + 2) * time.Minute)
	for i := 0; i < windows; i++ {
		c := float64(10 + i%7)
		w := protocol.WindowV1{EnvironmentSlug: "demo-harbor", DeploymentID: "dep-web", SessionID: "sess-web",
			WindowStart: first.Add(time.Duration(i) * time.Minute), WindowSeconds: 60,
			Metrics: protocol.MetricsV1{CPUPct: &protocol.PercentAggV1{N: 12, Sum: 12 * c, Min: c - 1, Max: c + 1, Last: c}}}
		b, _ := json.Marshal(w)
		r, err := cl.Post(context.Background(), "/api/ingest/telemetry", b)
		if err != nil || r.Status != http.StatusAccepted {
			t.Fatalf("window %d: %v %d %s", i, err, r.Status, r.Body)
		}
	}

	admin := d.Admin()
	// An ended deployment gives the events page a row to show.
	if out, code := proctest.RunCommand(t, bin, "", nil, "agent", "heartbeat", "--url", d.URL, "--key-id", keyID,
		"--key-file", filepath.Join(keyDir, "ingest.key"), "--env", "demo-harbor", "--deployment", "dep-old"); code != 0 {
		t.Fatalf("agent heartbeat exited %d:\n%s", code, out)
	}
	if _, err := admin.EndDeployment(context.Background(), "demo-harbor", "dep-old"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateBox(context.Background(), adminapi.CreateBoxRequest{Name: "box-web", Environment: "demo-harbor", BoxConfig: adminapi.BoxConfig{
		Region: "nyc3", Size: "s-1vcpu-1gb", Image: "ubuntu-24-04-x64",
		SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
		CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32", VolumeSizeGiB: 10}}); err != nil {
		t.Fatal(err)
	}
	jobsOf := func() []adminapi.Job {
		t.Helper()
		l, err := admin.ListJobs(context.Background(), adminapi.ListJobsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Jobs
	}

	start := time.Now()
	actx, cancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1100, 900))
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The whole browser session, a pulumi preview job included: on a busy
	// 2-vCPU machine that job alone took over a minute.
	ctx, cancel = context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	art := t.ArtifactDir()
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(art, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	location := func() string {
		t.Helper()
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	visit := func(path, mustSee string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(d.URL+path), chromedp.WaitVisible(chromedp.CSS(mustSee))); err != nil {
			t.Fatalf("%s: %v (at %s)", path, err, location())
		}
	}

	visit("/app", "#password")
	if loc := location(); loc != d.URL+"/login" {
		t.Fatalf("/app signed out landed on %s, want /login", loc)
	}
	shot("login")
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#password"), password), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("#fleet"))); err != nil {
		t.Fatalf("sign in: %v (at %s)", err, location())
	}
	shot("fleet")
	visit("/app/env/demo-harbor", "#deployments")
	shot("environment")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="/app/env/demo-harbor/deployments/dep-web"]`)),
		chromedp.WaitVisible(chromedp.CSS("figure[data-metric=cpuPct]"))); err != nil {
		t.Fatalf("deployment page: %v", err)
	}
	visit("/app/env/demo-harbor/deployments/dep-web?range=1h", "figure[data-metric=cpuPct]")
	shot("deployment")
	pts, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("figure[data-metric=cpuPct] svg"), "data-points"))
	if err != nil || pts.Value != strconv.Itoa(windows) {
		t.Fatalf("cpuPct chart: data-points %q (%v), want %d", pts.Value, err, windows)
	}
	line, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("figure[data-metric=cpuPct] polyline"), "points"))
	if err != nil || len(strings.Fields(line.Value)) != windows {
		t.Fatalf("cpuPct polyline has %d vertices (%v), want %d", len(strings.Fields(line.Value)), err, windows)
	}
	// The chart reads at a glance: its human title, value labels with
	// their unit on the value axis, clock labels and "UTC" on the time
	// axis, a <title> with the value on every point, and no GPU chart for
	// a machine that sent no GPU data.
	type chartFacts struct {
		Title              string
		YLabels, XLabels   []string
		PointTitles, GPU   int
		FirstTitle, Legend string
		Grid, Ticks        int
	}
	facts, err := chromedp.Run(ctx, chromedp.Evaluate[chartFacts](`(() => {
		const f = document.querySelector('figure[data-metric=cpuPct]');
		const txt = sel => [...f.querySelectorAll(sel)].map(e => e.textContent);
		const titles = f.querySelectorAll('svg .pts title');
		return {Title: f.querySelector('.chart-title').textContent, YLabels: txt('svg .yaxis text'), XLabels: txt('svg .xaxis text'),
			PointTitles: titles.length, FirstTitle: titles.length ? titles[0].textContent : '',
			Grid: f.querySelectorAll('svg .yaxis line.grid').length, Ticks: f.querySelectorAll('svg .xaxis line.tick').length,
			GPU: document.querySelectorAll('figure[data-metric^=gpu]').length,
			Legend: [...document.querySelectorAll('figure[data-metric=netRxBytes] .key')].map(e => e.textContent).join(',')};
	})()`))
	if err != nil {
		t.Fatalf("chart facts: %v", err)
	}
	t.Logf("CPU chart: %+v", facts)
	if facts.Title != "CPU %" || len(facts.YLabels) < 3 || facts.YLabels[0] != "0%" || facts.YLabels[len(facts.YLabels)-1] != "100%" {
		t.Errorf("CPU chart title %q, value labels %q: want \"CPU %%\" and 0%%…100%%", facts.Title, facts.YLabels)
	}
	clock := 0
	for _, l := range facts.XLabels {
		if len(l) == 5 && l[2] == ':' {
			clock++
		}
	}
	if clock < 3 || !slices.Contains(facts.XLabels, "UTC") {
		t.Errorf("time axis labels %q: want at least 3 clock times and UTC", facts.XLabels)
	}
	if facts.Grid != len(facts.YLabels) || facts.Ticks != clock {
		t.Errorf("%d grid lines for %d value labels, %d tick marks for %d time labels: want one each", facts.Grid, len(facts.YLabels), facts.Ticks, clock)
	}
	if facts.PointTitles != windows || !strings.HasSuffix(facts.FirstTitle, "%") {
		t.Errorf("%d point titles (first %q), want %d ending in %%", facts.PointTitles, facts.FirstTitle, windows)
	}
	if facts.GPU != 0 {
		t.Errorf("%d GPU charts for a deployment without GPU data", facts.GPU)
	}
	// Hovering a point: the pointer moves to window `hovered`'s dot, which
	// is then the element under it, drawn (:hover), and the tooltip the
	// browser shows there (the <title> of the nearest element that has
	// one) is that window's time and value with its unit. Headless
	// Chromium paints no native tooltip, so the screenshot shows the dot.
	const hovered = 20
	type point struct{ X, Y float64 }
	at, err := chromedp.Run(ctx, chromedp.Evaluate[point](fmt.Sprintf(`(() => {
		const p = document.querySelectorAll('figure[data-metric=cpuPct] svg .pts path')[%d];
		p.scrollIntoView({block: 'center'});
		const b = p.getBBox(), s = p.ownerSVGElement.createSVGPoint();
		s.x = b.x; s.y = b.y;
		const c = s.matrixTransform(p.getScreenCTM());
		return {X: c.x, Y: c.y};
	})()`, hovered)))
	if err != nil {
		t.Fatalf("point %d's position: %v", hovered, err)
	}
	if err := chromedp.Do(ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at.X, at.Y)); err != nil {
		t.Fatalf("hover point %d: %v", hovered, err)
	}
	type hover struct {
		Tag, Tooltip, Opacity string
		Index                 int
		Hovered               bool
	}
	hv, err := chromedp.Run(ctx, chromedp.Evaluate[hover](fmt.Sprintf(`(() => {
		const e = document.elementFromPoint(%f, %f);
		let tip = '';
		for (let n = e; n && !tip; n = n.parentElement) {
			const t = [...n.children].find(c => c.tagName === 'title');
			if (t) tip = t.textContent;
		}
		const all = [...document.querySelectorAll('figure[data-metric=cpuPct] svg .pts path')];
		return {Tag: e ? e.tagName : '', Tooltip: tip, Index: all.indexOf(e), Hovered: !!e && e.matches(':hover'),
			Opacity: e ? getComputedStyle(e).strokeOpacity : ''};
	})()`, at.X, at.Y)))
	if err != nil {
		t.Fatalf("under the pointer: %v", err)
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot chart-hover: %v", err)
	}
	if err := os.WriteFile(filepath.Join(art, "chart-hover.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("hover at (%.0f, %.0f): %+v", at.X, at.Y, hv)
	wantTip := fmt.Sprintf("%s %.1f%%", first.Add(hovered*time.Minute).Format("15:04"), float64(10+hovered%7))
	if hv.Index != hovered || !hv.Hovered || hv.Opacity != "1" || hv.Tooltip != wantTip {
		t.Errorf("hovering point %d: under the pointer %s (point %d, :hover %v, stroke-opacity %q) with tooltip %q, want point %d drawn with tooltip %q",
			hovered, hv.Tag, hv.Index, hv.Hovered, hv.Opacity, hv.Tooltip, hovered, wantTip)
	}
	visit("/getting-started", "#steps")
	shot("getting-started")
	visit("/app/env/demo-harbor/getting-started", "h1")
	if cloud, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#cloud-init"))); err != nil || !strings.HasPrefix(cloud, "#cloud-config") {
		t.Errorf("the environment's getting-started page has no cloud-init (%v): %.80q", err, cloud)
	}
	shot("env-getting-started")
	visit("/app/nope", "h1")
	if h, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("h1"))); err != nil || h != "Not found" {
		t.Errorf("a console 404 shows %q (%v), want the HTML page", h, err)
	}
	shot("not-found")
	visit("/app/events", "#events")
	evs, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#events tbody")))
	if err != nil || !strings.Contains(evs, "deployment-ended") || !strings.Contains(evs, "dep-old") {
		t.Fatalf("events page lists %q (%v), want dep-old's deployment-ended", evs, err)
	}
	shot("events")
	visit("/app/costs", "h1")
	shot("costs")

	// Converge: the environment links the box's Settings → Pulumi; its
	// preview form enqueues a job and lands on the job's page.
	visit("/app/env/demo-harbor", "#boxes")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#boxes a[href="/app/boxes/box-web"]`)), chromedp.WaitVisible(chromedp.CSS("#converge-preview"))); err != nil {
		t.Fatalf("box page: %v (at %s)", err, location())
	}
	shot("box")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#converge-preview")), chromedp.WaitVisible(chromedp.CSS("#job-status"))); err != nil {
		t.Fatalf("preview form: %v (at %s)", err, location())
	}
	shot("job")
	js := jobsOf()
	if len(js) != 1 || js[0].Action != "preview" || js[0].Box != "box-web" || location() != d.URL+"/app/jobs/"+js[0].ID {
		t.Fatalf("after the preview form: jobs %+v, at %s", js, location())
	}
	jobPath := "/app/jobs/" + js[0].ID
	// The destroy form with a wrong phrase is refused and enqueues nothing.
	visit("/app/boxes/box-web", "#confirmation")
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#confirmation"), "destroy box-wrong"), chromedp.Click(chromedp.CSS("#converge-destroy")),
		chromedp.WaitVisible(chromedp.CSS("#converge-error"))); err != nil {
		t.Fatalf("destroy form: %v (at %s)", err, location())
	}
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#converge-error")))
	if err != nil || !strings.Contains(msg, "confirmation did not match") {
		t.Fatalf("destroy refusal says %q (%v)", msg, err)
	}
	shot("destroy-refused")
	if n := len(jobsOf()); n != 1 {
		t.Fatalf("a refused destroy left %d jobs, want 1", n)
	}
	// The preview runs to success (the job page reloads itself meanwhile)
	// and its page then shows the outcome and the last progress report.
	testwait.Eventually(t, testwait.Converge, "the preview job to end", func() (bool, string) {
		j, err := admin.GetJob(context.Background(), js[0].ID)
		if err != nil {
			t.Fatalf("preview job: %v", err)
		}
		return j.Done(), fmt.Sprintf("%+v", j)
	})
	visit(jobPath, "#job-status")
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#job-status")))
	if err != nil || status != "succeeded" {
		j, _ := admin.GetJob(context.Background(), js[0].ID)
		t.Fatalf("preview job page says %q (%v): %s", status, err, j.Error)
	}
	if p, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#job-progress"))); err != nil || strings.HasPrefix(p, "none yet") {
		t.Fatalf("a finished preview shows no progress: %q (%v)", p, err)
	}
	shot("job-done")
	visit("/app/oracle?tab=cache", "#oracle-boxes")
	shot("oracle")

	// Phone width (phoneWidth CSS px): no page scrolls sideways, every
	// input has a label, and the first Tab reaches the skip link. The
	// width is compared with the emulated one, not innerWidth: a mobile
	// viewport widens itself to fit content that overflows.
	const phoneWidth = 390
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(phoneWidth, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	phone := func(name, path, mustSee string) {
		t.Helper()
		visit(path, mustSee)
		type fitness struct {
			Scroll, Inner int
			Unlabelled    []string
		}
		fit, err := chromedp.Run(ctx, chromedp.Evaluate[fitness](`({
			Scroll: document.scrollingElement.scrollWidth, Inner: window.innerWidth,
			Unlabelled: [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
				.filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')).map(e => e.name || e.id),
		})`))
		if err != nil {
			t.Fatalf("phone %s: %v", path, err)
		}
		shot("phone-" + name)
		if err := chromedp.Do(ctx, chromedp.KeyEvent("\t")); err != nil {
			t.Fatalf("phone %s: Tab: %v", path, err)
		}
		// A page with an autofocused field (login) starts there instead.
		focus, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[autofocus]') ? 'skip' : document.activeElement.className`))
		if err != nil {
			t.Fatalf("phone %s: %v", path, err)
		}
		t.Logf("phone %s: %d px wide (innerWidth %d) at %d px", path, fit.Scroll, fit.Inner, phoneWidth)
		if fit.Scroll > phoneWidth || fit.Inner > phoneWidth {
			t.Errorf("phone %s: the page is %d px wide (innerWidth %d) in a %d px viewport", path, fit.Scroll, fit.Inner, phoneWidth)
		}
		if len(fit.Unlabelled) > 0 {
			t.Errorf("phone %s: inputs without a label: %q", path, fit.Unlabelled)
		}
		if focus != "skip" {
			t.Errorf("phone %s: the first Tab focused %q, want the skip link", path, focus)
		}
	}
	for _, p := range []struct{ name, path, mustSee string }{
		{"fleet", "/app", "#fleet"},
		{"environment", "/app/env/demo-harbor", "#deployments"},
		{"deployment", "/app/env/demo-harbor/deployments/dep-web?range=1h", "figure[data-metric=cpuPct]"},
		{"env-getting-started", "/app/env/demo-harbor/getting-started", "h1"},
		{"events", "/app/events", "h1"},
		{"costs", "/app/costs", "h1"},
		{"oracle", "/app/oracle?tab=cache", "#oracle-boxes"},
		{"box", "/app/boxes/box-web", "#confirmation"},
		{"job", jobPath, "#job-status"},
	} {
		phone(p.name, p.path, p.mustSee)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1100, 900)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("header form button")), chromedp.WaitVisible(chromedp.CSS("#password"))); err != nil {
		t.Fatalf("sign out: %v", err)
	}
	visit("/app", "#password")
	if loc := location(); loc != d.URL+"/login" {
		t.Fatalf("/app after sign-out landed on %s, want /login", loc)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(phoneWidth, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	phone("login", "/login", "#password")
	phone("landing", "/", "main")
	phone("getting-started", "/getting-started", "#steps")
	t.Logf("browser suite: %s in Chromium; screenshots in %s", time.Since(start).Round(time.Millisecond), art)
}
