package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// cloudInit is the part of contrib/agent/cloud-init.yaml the test reads.
type cloudInit struct {
	WriteFiles []struct {
		Path, Permissions, Content string
	} `yaml:"write_files"`
	RunCmd [][]string `yaml:"runcmd"`
}

// fakeRelease is a release archive holding a stand-in "chalupa": a shell
// script answering `version` and `agent systemd-unit` as the real binary
// does.
func fakeRelease(t *testing.T) []byte {
	t.Helper()
	script := "#!/bin/sh\ncase \"$1 $2\" in\n\"version \") echo 'chalupa v9.9.9';;\n\"agent systemd-unit\") echo '[Unit]';;\n*) exit 3;;\nesac\n"
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "chalupa", Mode: 0o755, Size: int64(len(script))}); err != nil {
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

// TestAgentInstallVerifiesTheChecksum runs the install script from the
// cloud-init template (docs/operations.md, "Agent install") into a temporary
// root against a local release server: the right sha256 installs the binary
// and unit; a wrong one refuses and installs nothing. The template's runcmd
// passes exactly the three placeholders, and it carries no key material.
func TestAgentInstallVerifiesTheChecksum(t *testing.T) {
	raw, err := os.ReadFile("contrib/agent/cloud-init.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte("#cloud-config\n")) {
		t.Fatal("cloud-init.yaml must start with #cloud-config")
	}
	var ci cloudInit
	if err := yaml.Unmarshal(raw, &ci); err != nil {
		t.Fatalf("cloud-init.yaml is not valid YAML: %v", err)
	}
	if len(ci.WriteFiles) != 1 || ci.WriteFiles[0].Path != "/usr/local/lib/chalupa/install-agent.sh" {
		t.Fatalf("write_files: %+v", ci.WriteFiles)
	}
	want := []string{"/usr/local/lib/chalupa/install-agent.sh", "@VERSION@", "@RELEASE_URL@", "@SHA256@"}
	if len(ci.RunCmd) != 1 || strings.Join(ci.RunCmd[0], " ") != strings.Join(want, " ") {
		t.Fatalf("runcmd %v, want %v", ci.RunCmd, want)
	}
	for _, banned := range []string{"ingest.key:", "CHALUPA_INGEST_KEY", "BEGIN ", "-----"} {
		if strings.Contains(string(raw), banned) {
			t.Fatalf("the template mentions %q: it must never carry key material", banned)
		}
	}
	script := filepath.Join(t.TempDir(), "install-agent.sh")
	if err := os.WriteFile(script, []byte(ci.WriteFiles[0].Content), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := fakeRelease(t)
	sum := sha256.Sum256(archive)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/chalupa_v9.9.9_linux_amd64.tar.gz" {
			http.NotFound(w, r)
			return
		}
		w.Write(archive)
	}))
	defer srv.Close()
	url := srv.URL + "/chalupa_v9.9.9_linux_amd64.tar.gz"
	wrong := sha256.Sum256([]byte("something else"))
	for _, tc := range []struct {
		name    string
		url     string
		sha     string
		exit    int
		install bool
	}{
		{"right checksum", url, hex.EncodeToString(sum[:]), 0, true},
		{"wrong checksum", url, hex.EncodeToString(wrong[:]), 1, false},
		{"missing archive", srv.URL + "/nothing.tar.gz", hex.EncodeToString(sum[:]), 22, false},
		{"malformed checksum", url, "abc", 2, false},
		{"plain http to a remote host", "http://example.com/x.tar.gz", hex.EncodeToString(sum[:]), 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			cmd := exec.Command("sh", script, "v9.9.9", tc.url, tc.sha)
			cmd.Env = append(os.Environ(), "CHALUPA_INSTALL_ROOT="+root)
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
			bin := filepath.Join(root, "usr/local/bin/chalupa")
			unit := filepath.Join(root, "etc/systemd/system/chalupa-agent.service")
			for _, p := range []string{bin, unit} {
				_, err := os.Stat(p)
				if tc.install && err != nil {
					t.Fatalf("%s not installed: %v", p, err)
				}
				if !tc.install && err == nil {
					t.Fatalf("%s installed although the install was refused", p)
				}
			}
			if tc.install {
				if fi, _ := os.Stat(bin); fi.Mode().Perm() != 0o755 {
					t.Fatalf("binary mode %v", fi.Mode().Perm())
				}
				if fi, _ := os.Stat(filepath.Join(root, "etc/chalupa-agent")); fi.Mode().Perm() != 0o700 {
					t.Fatalf("/etc/chalupa-agent mode %v, want 0700", fi.Mode().Perm())
				}
			}
		})
	}
}
