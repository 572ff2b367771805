package agentrelease

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// userData is the part of the rendered template the tests read.
type userData struct {
	WriteFiles []struct {
		Path, Permissions, Content string
	} `yaml:"write_files"`
	RunCmd [][]string `yaml:"runcmd"`
}

func goodRelease() Release {
	return Release{Version: "v1.4.2", URL: "https://releases.example/chalupa/v1.4.2",
		SHA256: map[string]string{"amd64": strings.Repeat("a1", 32), "arm64": strings.Repeat("b2", 32)}}
}

func goodParams() Params {
	return Params{URL: "https://chalupa.example", Environment: "demo-harbor", Size: "s-1vcpu-1gb", SessionLimitMinutes: 120}
}

// TestRenderCloudInit: the one template carries both digests, the release
// directory and the box's agent settings as the install command's argv,
// the install script itself, and no key material.
func TestRenderCloudInit(t *testing.T) {
	out, err := RenderCloudInit(goodRelease(), goodParams())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "#cloud-config\n") {
		t.Fatal("user data must start with #cloud-config")
	}
	var ud userData
	if err := yaml.Unmarshal([]byte(out), &ud); err != nil {
		t.Fatalf("not valid YAML: %v", err)
	}
	if len(ud.WriteFiles) != 1 || ud.WriteFiles[0].Path != "/usr/local/lib/chalupa/install-agent.sh" || !strings.HasPrefix(ud.WriteFiles[0].Content, "#!/bin/sh\n") {
		t.Fatalf("write_files: %+v", ud.WriteFiles)
	}
	want := []string{"env", "CHALUPA_AGENT_URL=https://chalupa.example", "CHALUPA_AGENT_ENV=demo-harbor",
		"CHALUPA_AGENT_SIZE=s-1vcpu-1gb", "CHALUPA_AGENT_LIMIT_MINUTES=30", "CHALUPA_INSTALL_SESSION_MINUTES=120",
		"/usr/local/lib/chalupa/install-agent.sh", "v1.4.2", "https://releases.example/chalupa/v1.4.2",
		strings.Repeat("a1", 32), strings.Repeat("b2", 32)}
	if len(ud.RunCmd) != 1 || !slices.Equal(ud.RunCmd[0], want) {
		t.Fatalf("runcmd %q, want %q", ud.RunCmd, want)
	}
	for _, banned := range []string{"ingest.key:", "CHALUPA_INGEST_KEY", "CHALUPA_AGENT_KEY_ID=", "BEGIN ", "-----"} {
		if strings.Contains(out, banned) {
			t.Fatalf("the user data mentions %q: it must never carry key material", banned)
		}
	}
	p := goodParams()
	p.IdleLimitMinutes = 240
	again, err := RenderCloudInit(goodRelease(), p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(again, `"CHALUPA_AGENT_LIMIT_MINUTES=240"`) {
		t.Fatal("the box's idle limit is not rendered")
	}
}

// TestRenderCloudInitRefuses: a release Check refuses renders nothing and
// names the variable; so do settings the agent would refuse.
func TestRenderCloudInitRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Release, *Params)
		vars []string // variables named; nil for a Params refusal
	}{
		{"latest", func(r *Release, _ *Params) { r.Version = "latest" }, []string{EnvVersion}},
		{"a branch", func(r *Release, _ *Params) { r.Version = "main" }, []string{EnvVersion}},
		{"plain http", func(r *Release, _ *Params) { r.URL = "http://releases.example/v1.4.2" }, []string{EnvReleaseURL}},
		{"a quote in the URL", func(r *Release, _ *Params) { r.URL = `https://releases.example/v1"; rm -rf /` }, []string{EnvReleaseURL}},
		{"missing arm64 digest", func(r *Release, _ *Params) { delete(r.SHA256, "arm64") }, []string{EnvSHA256ARM64}},
		{"missing both digests", func(r *Release, _ *Params) { r.SHA256 = nil }, []string{EnvSHA256AMD64, EnvSHA256ARM64}},
		{"nothing configured", func(r *Release, _ *Params) { *r = Release{} }, []string{EnvVersion, EnvReleaseURL, EnvSHA256AMD64, EnvSHA256ARM64}},
		{"plain http control plane", func(_ *Release, p *Params) { p.URL = "http://chalupa.example" }, nil},
		{"control plane URL with a path", func(_ *Release, p *Params) { p.URL = "https://chalupa.example/x" }, nil},
		{"bad environment", func(_ *Release, p *Params) { p.Environment = "Demo Harbor" }, nil},
		{"idle limit over a week", func(_ *Release, p *Params) { p.IdleLimitMinutes = MaxIdleLimitMinutes + 1 }, nil},
		{"negative session", func(_ *Release, p *Params) { p.SessionLimitMinutes = -1 }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, p := goodRelease(), goodParams()
			tc.edit(&r, &p)
			out, err := RenderCloudInit(r, p)
			if err == nil || out != "" {
				t.Fatalf("rendered %d bytes, err %v; want a refusal", len(out), err)
			}
			if tc.vars == nil {
				if !errors.Is(err, ErrParams) {
					t.Fatalf("err %v, want ErrParams", err)
				}
				return
			}
			if !errors.Is(err, ErrRelease) {
				t.Fatalf("err %v, want ErrRelease", err)
			}
			if got := Variables(err); !slices.Equal(got, tc.vars) {
				t.Fatalf("Variables = %v, want %v", got, tc.vars)
			}
			if r.URL != "" && strings.Contains(err.Error(), r.URL) {
				t.Fatal("the error carries the URL")
			}
		})
	}
}

// TestRenderCloudInitLoopbackControlPlane: plain http is the agent's own
// rule for a loopback control plane (tests), so the template accepts it.
func TestRenderCloudInitLoopbackControlPlane(t *testing.T) {
	p := goodParams()
	p.URL = "http://127.0.0.1:8080"
	if _, err := RenderCloudInit(goodRelease(), p); err != nil {
		t.Fatal(err)
	}
}

// TestTemplateNamesTheCommandThatWorks: every `chalupa config cloud-init`
// the template's comments show carries --url, without which the command
// exits 2 (unless CHALUPA_ORIGIN is set; docs/operations.md, "Agent
// install"), so the line works as written.
func TestTemplateNamesTheCommandThatWorks(t *testing.T) {
	n := 0
	for i, line := range strings.Split(cloudInitTemplate, "\n") {
		if !strings.Contains(line, "chalupa config cloud-init") {
			continue
		}
		n++
		if !strings.Contains(line, "--url") {
			t.Errorf("line %d shows the command without --url: %s", i+1, line)
		}
	}
	if n == 0 {
		t.Fatal("the template names no chalupa config cloud-init command")
	}
}
