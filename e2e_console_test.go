package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest/signer"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
)

// chromiumPath is where Debian's chromium package (installed by
// contrib/install-test-tools.sh) puts the browser.
const chromiumPath = "/usr/bin/chromium"

// TestConsoleInChromium drives the built binary's console in Debian's
// headless Chromium: /app sends a stranger to login; sign in; the fleet;
// an environment whose deployment has 40 minutes of telemetry; its charts
// with one vertex per point; events; sign out; /app redirects again. A
// screenshot of each page is written under the test's artifact directory
// (go test -artifacts keeps them).
func TestConsoleInChromium(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: run contrib/install-test-tools.sh", chromiumPath)
		}
		t.Skipf("%s is missing: run contrib/install-test-tools.sh", chromiumPath)
	}
	bin := daemontest.BuildBinary(t)
	d := daemontest.StartDaemon(t, bin, nil)

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
	key, err := signer.DecodeKeyMaterial(string(material))
	if err != nil {
		t.Fatal(err)
	}
	if out, code := daemontest.RunCommand(t, bin, "", nil, "agent", "heartbeat", "--url", d.URL, "--key-id", keyID,
		"--key-file", filepath.Join(keyDir, "ingest.key"), "--env", "demo-harbor", "--deployment", "dep-web"); code != 0 {
		t.Fatalf("agent heartbeat exited %d:\n%s", code, out)
	}
	cl := &signer.Client{BaseURL: d.URL, KeyID: keyID, Key: key, HTTP: &http.Client{Timeout: 30 * time.Second}}
	// 40 one-minute windows ending two minutes ago: 40 points at the 1h
	// range's one-minute step.
	const windows = 40
	first := time.Now().UTC().Truncate(time.Minute).Add(-(windows + 2) * time.Minute)
	for i := 0; i < windows; i++ {
		c := float64(10 + i%7)
		w := telemetry.WindowV1{EnvironmentSlug: "demo-harbor", DeploymentID: "dep-web", SessionID: "sess-web",
			WindowStart: first.Add(time.Duration(i) * time.Minute), WindowSeconds: 60,
			Metrics: telemetry.MetricsV1{CPUPct: &telemetry.AggV1{N: 12, Sum: 12 * c, Min: c - 1, Max: c + 1, Last: c}}}
		b, _ := json.Marshal(w)
		r, err := cl.Post(context.Background(), "/api/ingest/telemetry", b)
		if err != nil || r.Status != http.StatusAccepted {
			t.Fatalf("window %d: %v %d %s", i, err, r.Status, r.Body)
		}
	}

	start := time.Now()
	actx, cancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromiumPath), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1100, 900))
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
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
	visit("/app/events", "h1")
	shot("events")
	visit("/app/costs", "h1")
	shot("costs")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("header form button")), chromedp.WaitVisible(chromedp.CSS("#password"))); err != nil {
		t.Fatalf("sign out: %v", err)
	}
	visit("/app", "#password")
	if loc := location(); loc != d.URL+"/login" {
		t.Fatalf("/app after sign-out landed on %s, want /login", loc)
	}
	t.Logf("browser suite: %s in Chromium; screenshots in %s", time.Since(start).Round(time.Millisecond), art)
}
