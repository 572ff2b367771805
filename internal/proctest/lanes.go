package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// FastLaneFlag is the go test flag contrib/test.sh --fast passes and its
// full run never does (docs/architecture.md, "Tests"). Under it every
// helper here that builds the chalupa binary or runs pulumi, Chromium or
// `litestream restore` skips its test, so the fast lane leaves out exactly
// what the full run adds, and a test cannot drop out of the full run by
// forgetting a flag of its own.
const FastLaneFlag = "-short"

// fullRunTools are the tools ToolPath skips under FastLaneFlag, with what
// running them costs; versitygw is missing on purpose: an S3 server on
// 127.0.0.1 starts in well under a second, so its tests stay in the fast lane.
var fullRunTools = map[string]string{
	"litestream": "runs litestream restore",
	"pulumi":     "runs the pulumi CLI",
}

// FullRunOnly skips t when go test runs with FastLaneFlag (contrib/test.sh
// --fast); what says what the test does that belongs to the full run
// ("builds the chalupa binary"). Tests that reach the heavy work through
// BuildBinary, BuildWithheld, PulumiHome, Restore, Chromium or ToolPath need
// not call it: those helpers call it themselves.
func FullRunOnly(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s: %s, which belongs to the full run (contrib/test.sh without --fast)", FastLaneFlag, what)
	}
}

// ChromiumPath is where Debian's chromium package, which
// contrib/install-test-tools.sh installs when run as root, puts the browser
// the console tests drive through chromedp.
const ChromiumPath = "/usr/bin/chromium"

// Chromium returns ChromiumPath for a browser test. It skips the test under
// FastLaneFlag; when the browser is missing it skips the test with the
// install command, or fails it when the environment has CI=true (a missing
// browser must not turn a CI run green).
func Chromium(t testing.TB) string {
	t.Helper()
	FullRunOnly(t, "drives Chromium")
	if _, err := exec.LookPath(ChromiumPath); err != nil {
		msg := fmt.Sprintf("%s is missing: run %s as root", ChromiumPath, InstallCommand)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: a missing tool fails the run)", msg)
		}
		t.Skip(msg)
	}
	return ChromiumPath
}

// PromtoolPath is where Debian's prometheus package, which
// contrib/install-test-tools.sh installs when run as root, puts promtool,
// which checks and unit-tests contrib/prometheus/chalupa-alerts.yml
// (docs/operations.md, "Alerts").
const PromtoolPath = "/usr/bin/promtool"

// Promtool returns PromtoolPath. It runs in both lanes (checking the rules
// takes well under a second); when promtool is missing it skips the test
// with the install command, or fails it when the environment has CI=true
// (a missing tool must not turn a CI run green).
func Promtool(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath(PromtoolPath); err != nil {
		msg := fmt.Sprintf("%s is missing: run %s as root (Debian's prometheus package)", PromtoolPath, InstallCommand)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: a missing tool fails the run)", msg)
		}
		t.Skip(msg)
	}
	return PromtoolPath
}

// ShellcheckPath is where Debian's shellcheck package, which
// contrib/install-test-tools.sh installs when run as root, puts
// shellcheck; its settings are the repository's .shellcheckrc.
const ShellcheckPath = "/usr/bin/shellcheck"

// Shellcheck returns ShellcheckPath. It runs in both lanes (a script takes
// well under a second); when shellcheck is missing it skips the test with
// the install command, or fails it when the environment has CI=true.
func Shellcheck(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath(ShellcheckPath); err != nil {
		msg := fmt.Sprintf("%s is missing: run %s as root (Debian's shellcheck package)", ShellcheckPath, InstallCommand)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: a missing tool fails the run)", msg)
		}
		t.Skip(msg)
	}
	return ShellcheckPath
}
