package pulumiexec_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/pulumiexec"
)

// TestExplain: the diagnostic a failed job keeps is drawn from the real
// CLI's output (testdata/pulumi-output, captured from pulumi 3.274.1 with
// the engine and the test provider against the DigitalOcean API test
// server: an up with an empty PULUMI_HOME and no network, an unknown
// token, a read-only token, injected 429 and 500 answers, and a second up
// while the first held the lock). It names the cause and the fix once,
// never a URL or the API's request id; the raw output stays the detail
// (docs/operations.md, "Converge", under Job errors).
func TestExplain(t *testing.T) {
	const home = "/var/lib/chalupa/.pulumi"
	for _, tc := range []struct {
		file string
		kind string
		want []string
	}{
		{"up-noplugin.txt", pulumiexec.ExplainPluginMissing, []string{
			"install the DigitalOcean provider with the daemon's PULUMI_HOME: `PULUMI_HOME=/var/lib/chalupa/.pulumi pulumi plugin install resource digitalocean 4.62.0`"}},
		{"up-unauthorized.txt", pulumiexec.ExplainTokenRefused, []string{
			"DigitalOcean refused the provision token (digitalocean:index:Volume volume): 401 Unable to authenticate you", "DIGITALOCEAN_PROVISION_TOKEN"}},
		{"up-forbidden.txt", pulumiexec.ExplainTokenScope, []string{
			"lacks a scope (digitalocean:index:Volume volume): 403 You do not have access for the attempted action", "DIGITALOCEAN_PROVISION_TOKEN"}},
		{"up-ratelimited.txt", pulumiexec.ExplainRateLimited, []string{"429 API Rate limit exceeded", "again in a minute"}},
		{"up-servererror.txt", pulumiexec.ExplainProviderError, []string{"DigitalOcean failed (digitalocean:index:Volume volume): 500 Server Error"}},
		{"up-locked.txt", pulumiexec.ExplainLocked, []string{
			"another update in progress", "stack box-1-data, by root@vm pid 6838", "chalupa admin state cancel box-1"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "pulumi-output", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			e := pulumiexec.Explain(errors.New(string(raw)), "box-1", home)
			t.Log(e.Diagnostic)
			if e.Kind != tc.kind {
				t.Fatalf("kind %q, want %q; diagnostic: %s", e.Kind, tc.kind, e.Diagnostic)
			}
			for _, w := range tc.want {
				if strings.Count(e.Diagnostic, w) != 1 {
					t.Errorf("diagnostic %q lacks %q (once)", e.Diagnostic, w)
				}
			}
			for _, never := range []string{"http://", "https://", "request \"", "\n"} {
				if strings.Contains(e.Diagnostic, never) {
					t.Errorf("diagnostic carries %q: %s", never, e.Diagnostic)
				}
			}
			if e.Error() != e.Diagnostic || e.Detail() != string(raw) {
				t.Error("the error is not the diagnostic, or the detail is not the raw output")
			}
		})
	}
	t.Run("generic", func(t *testing.T) {
		raw := "failed to run update: exit status 1\ncode: 1\nstdout: Updating (box-1-compute):\nDiagnostics:\n  pulumi:pulumi:Stack (chalupa-box-1-compute):\n    error: update failed\n\n  digitalocean:index:Droplet (box-1):\n    error: creating droplet: size s-9 is not available in https://example.test/v2/sizes\n\nResources:\n"
		e := pulumiexec.Explain(errors.New(raw), "box-1", home)
		if e.Kind != "" || e.Diagnostic != "digitalocean:index:Droplet box-1: creating droplet: size s-9 is not available in [url]" {
			t.Fatalf("generic diagnostic %q (%s)", e.Diagnostic, e.Kind)
		}
	})
	t.Run("not pulumi output", func(t *testing.T) {
		err := fmt.Errorf("checkpoint: environment of box box-1: %w", errors.New("gone"))
		if e := pulumiexec.Explain(err, "box-1", home); e.Diagnostic != err.Error() || !errors.Is(e, err) {
			t.Fatalf("diagnostic %q", e.Diagnostic)
		}
	})
}

// TestCheckPlugin: serve's start check finds the DigitalOcean provider in
// PULUMI_HOME as the real CLI installs it, and names the install command
// when it is missing (docs/operations.md, "Converge").
func TestCheckPlugin(t *testing.T) {
	home := t.TempDir()
	err := pulumiexec.CheckPlugin(home)
	if !errors.Is(err, pulumiexec.ErrPluginMissing) || !strings.Contains(err.Error(), "PULUMI_HOME="+home+" pulumi plugin install resource digitalocean 4.62.0") {
		t.Fatalf("empty PULUMI_HOME: %v", err)
	}
	cli := proctest.ToolPath(t, "pulumi")
	inst := exec.Command(cli, "plugin", "install", "resource", "digitalocean", pulumiexec.ProviderVersion, "--file", "/bin/true")
	inst.Env = append(os.Environ(), "PULUMI_HOME="+home, "PULUMI_SKIP_UPDATE_CHECK=true")
	if out, err := inst.CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if err := pulumiexec.CheckPlugin(home); err != nil {
		t.Fatalf("after the install: %v", err)
	}
}
