package e2e

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
)

// TestConsoleAlertsInChromium: in Debian's headless Chromium, the fleet
// page of a daemon with an open critical alert and an acknowledged
// warning opens with them, above the summary, critical first, each with
// its kind, subject, state and first thing to do; at phone width (390 px)
// the section does not scroll sideways (docs/operations.md, "Alerts",
// operating alerts). A screenshot of each width is written under the
// test's artifact directory.
func TestConsoleAlertsInChromium(t *testing.T) {
	t.Parallel()
	chromium := proctest.Chromium(t)
	// The console accepts forms from its own origin only: the browser's
	// must be the daemon's configured one, so the test listens first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: map[string]string{"CHALUPA_LISTEN": ln.Addr().String()}})
	srv := &http.Server{Handler: p.App.Server.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()

	ctx := context.Background()
	const password = "a console password for the alerts test"
	if _, err := p.Admin.SetConsolePassword(ctx, adminapi.SetConsolePasswordRequest{Password: password}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := p.App.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		for _, a := range []storage.Alert{
			{ID: "01WARNACKED", Kind: "reaper-rate-limited", SubjectKind: "platform", Severity: "warning", OpenedAt: now.Add(-2 * time.Hour), AckedAt: now},
			{ID: "01CRITOPEN", Kind: "reaper-overdue", SubjectKind: "platform", Severity: "critical", OpenedAt: now.Add(-10 * time.Minute)},
		} {
			a.LastSentAt = a.OpenedAt
			if err := storage.InsertAlert(ctx, tx, a); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	actx, cancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1100, 900))
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	bctx, cancel = context.WithTimeout(bctx, 2*time.Minute) // a guard against a hang, not a speed goal
	defer cancel()
	art := t.ArtifactDir()
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(art, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/login"), chromedp.WaitVisible(chromedp.CSS("#password")),
		chromedp.SendKeys(chromedp.CSS("#password"), password), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("#alerts"))); err != nil {
		t.Fatalf("sign in to the fleet page: %v", err)
	}
	shot("fleet-alerts")
	type facts struct {
		Heading, Text   string
		IDs             []string
		AboveSummary    bool
		Role            string
		ScrollW, Client float64
	}
	read := func() facts {
		t.Helper()
		f, err := chromedp.Run(bctx, chromedp.Evaluate[facts](`(() => {
			const s = document.querySelector('#alerts'), sum = document.querySelector('#summary');
			return {Heading: s.querySelector('h2').textContent, Text: s.textContent,
				IDs: [...s.querySelectorAll('li')].map(li => li.id),
				AboveSummary: !!(s.compareDocumentPosition(sum) & Node.DOCUMENT_POSITION_FOLLOWING) && s.getBoundingClientRect().bottom <= sum.getBoundingClientRect().top,
				Role: s.getAttribute('role'),
				ScrollW: document.documentElement.scrollWidth, Client: document.documentElement.clientWidth};
		})()`))
		if err != nil {
			t.Fatalf("alerts facts: %v", err)
		}
		return f
	}
	f := read()
	if f.Heading != "Open alerts (2)" || strings.Join(f.IDs, ",") != "alert-01CRITOPEN,alert-01WARNACKED" || !f.AboveSummary || f.Role != "alert" {
		t.Fatalf("alerts section: %+v; want 2 alerts, critical first, above the summary, role alert", f)
	}
	for _, want := range []string{"critical reaper-overdue on platform", "warning reaper-rate-limited on platform", "acknowledged", "First thing to do: "} {
		if !strings.Contains(strings.Join(strings.Fields(f.Text), " "), want) {
			t.Errorf("alerts section lacks %q: %q", want, f.Text)
		}
	}
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#alerts"))); err != nil {
		t.Fatal(err)
	}
	shot("fleet-alerts-phone")
	if f := read(); f.ScrollW > f.Client {
		t.Errorf("at 390 px the page scrolls sideways: %v > %v", f.ScrollW, f.Client)
	}
	if errors.Is(bctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the browser session timed out")
	}
}
