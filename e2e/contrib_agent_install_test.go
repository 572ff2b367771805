package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
)

// renderedUserData is the part of the rendered cloud-init the test reads.
type renderedUserData struct {
	WriteFiles []struct {
		Path, Permissions, Content string
	} `yaml:"write_files"`
	RunCmd [][]string `yaml:"runcmd"`
}

// stubAgentArchive is a chalupa-agent archive as contrib/release.sh lays
// it out (one file, chalupa-agent, 0755) holding a stand-in: a shell script
// answering `version` and `systemd-unit` as the real agent does, and
// leaving a marker under CHALUPA_INSTALL_ROOT whenever it runs, so a test
// sees whether an archive was ever run. arch is written into the unit, so
// the test sees which archive was installed.
func stubAgentArchive(t *testing.T, arch string) []byte {
	t.Helper()
	script := "#!/bin/sh\ntouch \"$CHALUPA_INSTALL_ROOT/ran-" + arch + "\"\ncase \"$1\" in\nversion) echo 'chalupa-agent v9.9.9';;\nsystemd-unit) printf '[Unit]\\n# " + arch + "\\n';;\n*) exit 3;;\nesac\n"
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "chalupa-agent", Mode: 0o755, Size: int64(len(script))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(script)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestAgentInstallVerifiesTheChecksum renders the one cloud-init template
// (agentrelease.RenderCloudInit; docs/operations.md, "Agent install") for a
// release served over https on loopback and runs its install command, argv
// as rendered, under CHALUPA_INSTALL_ROOT with `uname -m` stubbed: the
// machine's archive is picked by its own digest and verified before
// anything from it runs, the binary, unit and agent.env land with their
// modes, and every refusal installs and runs nothing.
func TestAgentInstallVerifiesTheChecksum(t *testing.T) {
	const version = "v9.9.9"
	archives := map[string][]byte{"amd64": stubAgentArchive(t, "amd64"), "arm64": stubAgentArchive(t, "arm64")}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for arch, b := range archives {
			if r.URL.Path == "/rel/"+agentrelease.ArchiveName(version, arch) {
				w.Write(b)
				return
			}
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	tmp := t.TempDir()
	caFile := filepath.Join(tmp, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	rel := agentrelease.Release{Version: version, URL: srv.URL + "/rel",
		SHA256: map[string]string{"amd64": sha256Hex(archives["amd64"]), "arm64": sha256Hex(archives["arm64"])}}
	params := agentrelease.Params{URL: "https://chalupa.example", Environment: "demo-harbor", Size: "s-1vcpu-1gb",
		IdleLimitMinutes: 45, SessionLimitMinutes: 90}
	userData, err := agentrelease.RenderCloudInit(rel, params)
	if err != nil {
		t.Fatal(err)
	}
	var ud renderedUserData
	if err := yaml.Unmarshal([]byte(userData), &ud); err != nil {
		t.Fatalf("the rendered user data is not valid YAML: %v", err)
	}
	if len(ud.WriteFiles) != 1 || len(ud.RunCmd) != 1 {
		t.Fatalf("write_files %d, runcmd %d: want one each", len(ud.WriteFiles), len(ud.RunCmd))
	}
	script := filepath.Join(tmp, "install-agent.sh")
	if err := os.WriteFile(script, []byte(ud.WriteFiles[0].Content), 0o755); err != nil {
		t.Fatal(err)
	}
	argv := slices.Clone(ud.RunCmd[0])
	at := slices.Index(argv, ud.WriteFiles[0].Path)
	if argv[0] != "env" || at < 0 || len(argv) != at+5 {
		t.Fatalf("runcmd %q: want env SETTINGS… %s VERSION URL SHA256_AMD64 SHA256_ARM64", argv, ud.WriteFiles[0].Path)
	}
	argv[at] = script
	wrong := sha256Hex([]byte("something else"))
	with := func(i int, v string) []string { a := slices.Clone(argv); a[at+i] = v; return a }
	for _, tc := range []struct {
		name    string
		machine string
		argv    []string
		exit    int
		arch    string // the archive installed, "" for none
	}{
		{"x86_64 installs the amd64 archive", "x86_64", argv, 0, "amd64"},
		{"aarch64 installs the arm64 archive", "aarch64", argv, 0, "arm64"},
		{"arm64 installs the arm64 archive", "arm64", argv, 0, "arm64"},
		{"an unknown machine is refused", "riscv64", argv, 2, ""},
		{"a wrong amd64 checksum", "x86_64", with(3, wrong), 1, ""},
		{"a wrong arm64 checksum", "aarch64", with(4, wrong), 1, ""},
		{"the other arch's checksum", "x86_64", with(3, rel.SHA256["arm64"]), 1, ""},
		{"a version the release directory lacks", "x86_64", with(1, "v9.9.8"), 22, ""},
		{"a release directory without the archive", "x86_64", with(2, srv.URL+"/elsewhere"), 22, ""},
		{"a malformed checksum", "x86_64", with(3, "abc"), 2, ""},
		{"latest", "x86_64", with(1, "latest"), 2, ""},
		{"plain http to a remote host", "x86_64", with(2, "http://example.com/rel"), 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			bin := t.TempDir()
			if err := os.WriteFile(filepath.Join(bin, "uname"), []byte("#!/bin/sh\necho "+tc.machine+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
			cmd.Env = append(os.Environ(), "CHALUPA_INSTALL_ROOT="+root, "CURL_CA_BUNDLE="+caFile,
				"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.exit {
				t.Fatalf("exit %d, want %d\n%s", code, tc.exit, out)
			}
			binPath := filepath.Join(root, "usr/local/bin/chalupa-agent")
			unit := filepath.Join(root, "etc/systemd/system/chalupa-agent.service")
			envFile := filepath.Join(root, "etc/chalupa-agent/agent.env")
			if tc.arch == "" {
				for _, p := range []string{binPath, unit, envFile, filepath.Join(root, "ran-amd64"), filepath.Join(root, "ran-arm64")} {
					if _, err := os.Stat(p); err == nil {
						t.Fatalf("%s exists although the install was refused", p)
					}
				}
				return
			}
			got, err := os.ReadFile(binPath)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(got, []byte("ran-"+tc.arch)) {
				t.Fatalf("installed the wrong archive for %s", tc.machine)
			}
			if u, _ := os.ReadFile(unit); !strings.Contains(string(u), "# "+tc.arch) {
				t.Fatalf("unit %q is not the one the installed agent printed", u)
			}
			for p, want := range map[string]os.FileMode{binPath: 0o755, unit: 0o644, envFile: 0o600, filepath.Join(root, "etc/chalupa-agent"): 0o700} {
				if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
					t.Fatalf("%s: %v, mode want %v", p, err, want)
				}
			}
			env, _ := os.ReadFile(envFile)
			for _, line := range []string{"CHALUPA_AGENT_URL=https://chalupa.example", "CHALUPA_AGENT_ENV=demo-harbor",
				"CHALUPA_AGENT_SIZE=s-1vcpu-1gb", "CHALUPA_AGENT_LIMIT_MINUTES=45"} {
				if !slices.Contains(strings.Split(string(env), "\n"), line) {
					t.Fatalf("agent.env lacks %q:\n%s", line, env)
				}
			}
			if !regexp.MustCompile(`(?m)^CHALUPA_AGENT_SESSION_EXPIRES_AT=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).Match(env) {
				t.Fatalf("agent.env lacks the session expiry:\n%s", env)
			}
			if strings.Contains(string(env), "KEY") {
				t.Fatalf("agent.env names a key:\n%s", env)
			}
		})
	}
	t.Run("an existing agent.env is kept", func(t *testing.T) {
		root := t.TempDir()
		envFile := filepath.Join(root, "etc/chalupa-agent/agent.env")
		if err := os.MkdirAll(filepath.Dir(envFile), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(envFile, []byte("CHALUPA_AGENT_URL=https://kept.example\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "CHALUPA_INSTALL_ROOT="+root, "CURL_CA_BUNDLE="+caFile)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if b, _ := os.ReadFile(envFile); string(b) != "CHALUPA_AGENT_URL=https://kept.example\n" {
			t.Fatalf("agent.env rewritten: %q (a re-run must not move the session expiry)", b)
		}
	})
}
