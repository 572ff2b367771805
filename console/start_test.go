package console

import (
	"html"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestGettingStartedPublic: the public getting-started page gives the
// generic steps with placeholders and shows nothing of the fleet: no
// environment name, no signed-in controls.
func TestGettingStartedPublic(t *testing.T) {
	c, db := testConsole(t)
	c.d.ModeWarning = "the reaper is in dry-run mode"
	storagetest.Environment(t, db, storage.Environment{Slug: "private-harbor"})
	rec := httptest.NewRecorder()
	c.gettingStarted(rec, httptest.NewRequest("GET", "/getting-started", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	for _, want := range []string{"chalupa admin environment create SLUG", "chalupa admin keys issue SLUG --out DIR",
		"chalupa config cloud-init --env SLUG", "--tag-names chalupa,chalupa:env:SLUG", "CHALUPA_AGENT_SHA256_ARM64", "root@DROPLET:/etc/chalupa-agent/"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, leak := range []string{"private-harbor", "Sign out", "dry-run"} {
		if strings.Contains(body, leak) {
			t.Errorf("the public page shows %q", leak)
		}
	}
}

// TestEnvGettingStarted: signed in, an environment's page carries the
// cloud-init agentrelease.RenderCloudInit renders for the configured release
// (as `chalupa config cloud-init` does), both digests and the key
// delivery steps for that environment; without a usable release it names
// exactly the variables to set and shows no cloud-init; an unknown
// environment is 404.
func TestEnvGettingStarted(t *testing.T) {
	c, db := testConsole(t)
	c.d.Origin = "https://chalupa.example.com"
	storagetest.Environment(t, db, storage.Environment{Slug: "harbor"})
	amd, arm := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	good := agentrelease.Release{Version: "v1.4.2", URL: "https://releases.example.com/chalupa/v1.4.2", SHA256: map[string]string{"amd64": amd, "arm64": arm}}
	get := func(t *testing.T, slug string) (int, string) {
		t.Helper()
		return pageOf(t, c.envGettingStarted, "/app/env/"+slug+"/getting-started", "slug", slug)
	}
	t.Run("release configured", func(t *testing.T) {
		c.d.AgentRelease = good
		want, err := agentrelease.RenderCloudInit(good, agentrelease.Params{URL: c.d.Origin, Environment: "harbor"})
		if err != nil {
			t.Fatal(err)
		}
		code, body := get(t, "harbor")
		if code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		i := strings.Index(body, `<pre class="code" id="cloud-init">`)
		if i < 0 {
			t.Fatalf("no cloud-init:\n%s", body)
		}
		pre := body[i+len(`<pre class="code" id="cloud-init">`):]
		pre = pre[:strings.Index(pre, "</pre>")]
		if got := html.UnescapeString(pre); got != want {
			t.Errorf("the page's cloud-init is not the renderer's:\n%s\n---\n%s", got, want)
		}
		for _, s := range []string{`id="sha256-amd64">` + amd, `id="sha256-arm64">` + arm, "chalupa-agent_v1.4.2_linux_arm64.tar.gz",
			"chalupa admin keys issue harbor --out ./harbor-key", "scp ./harbor-key/ingest.key ./harbor-key/key-id root@DROPLET:/etc/chalupa-agent/",
			"--tag-names chalupa,chalupa:env:harbor"} {
			if !strings.Contains(body, s) {
				t.Errorf("page lacks %q", s)
			}
		}
	})
	for _, tc := range []struct {
		name    string
		release agentrelease.Release
		want    []string
	}{
		{"no release", agentrelease.Release{}, []string{agentrelease.EnvVersion, agentrelease.EnvReleaseURL, agentrelease.EnvSHA256AMD64, agentrelease.EnvSHA256ARM64}},
		{"a bad digest", agentrelease.Release{Version: good.Version, URL: good.URL, SHA256: map[string]string{"amd64": amd, "arm64": "latest"}}, []string{agentrelease.EnvSHA256ARM64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.d.AgentRelease = tc.release
			code, body := get(t, "harbor")
			if code != http.StatusOK || !strings.Contains(body, `id="release-missing"`) || strings.Contains(body, `id="cloud-init"`) {
				t.Fatalf("status %d, want the missing variables and no cloud-init:\n%s", code, body)
			}
			for _, v := range []string{agentrelease.EnvVersion, agentrelease.EnvReleaseURL, agentrelease.EnvSHA256AMD64, agentrelease.EnvSHA256ARM64} {
				named := strings.Contains(body, "<code>"+v+"</code>")
				if wanted := strings.Contains(strings.Join(tc.want, " "), v); named != wanted {
					t.Errorf("%s named %v, want %v", v, named, wanted)
				}
			}
			if strings.Contains(body, "latest") {
				t.Error("the page shows a variable's value")
			}
		})
	}
	if code, _ := get(t, "nope"); code != http.StatusNotFound {
		t.Errorf("unknown environment: %d, want 404", code)
	}
}
