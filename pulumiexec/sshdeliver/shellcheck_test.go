package sshdeliver_test

import (
	"os/exec"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
)

// renderedScripts are the shell scripts chalupa writes for a droplet, as
// rendered: the cloud-init user data's install script and runcmd line
// (docs/operations.md, "Agent install") and the commands run over SSH —
// key delivery, key rotation, agent upgrade and restore
// (docs/operations.md, "SSH key delivery"). Each maps a name to its text.
func renderedScripts(t *testing.T) map[string]string {
	t.Helper()
	rel := agentrelease.Release{Version: "v1.4.2", URL: "https://releases.example/chalupa/v1.4.2",
		SHA256: map[string]string{"amd64": strings.Repeat("a1", 32), "arm64": strings.Repeat("b2", 32)}}
	ud, err := agentrelease.RenderCloudInit(rel, agentrelease.Params{URL: "https://chalupa.example",
		Environment: "demo-harbor", Size: "s-1vcpu-1gb", SessionLimitMinutes: 120})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
		RunCmd     [][]string                       `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal([]byte(ud), &doc); err != nil {
		t.Fatalf("the user data is not YAML: %v", err)
	}
	scripts := map[string]string{
		"ssh: key delivery (WriteCommand)":   sshdeliver.WriteCommand(sshdeliver.DefaultDir, "ingest.key", sshdeliver.DefaultOwner),
		"ssh: key rotation (RotateScript)":   sshdeliver.RotateScript(sshdeliver.DefaultDir, sshdeliver.DefaultOwner),
		"ssh: agent upgrade (UpgradeScript)": sshdeliver.UpgradeScript(rel),
		"ssh: agent restore (RestoreScript)": sshdeliver.RestoreScript(),
	}
	for _, f := range doc.WriteFiles {
		if strings.HasSuffix(f.Path, ".sh") {
			scripts["cloud-init: "+f.Path] = f.Content
		}
	}
	// cloud-init turns each runcmd list into one line of a /bin/sh
	// script, every word single-quoted.
	for i, argv := range doc.RunCmd {
		words := make([]string, len(argv))
		for j, w := range argv {
			words[j] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
		scripts["cloud-init: runcmd "+string(rune('0'+i))] = strings.Join(words, " ") + "\n"
	}
	if len(scripts) < 6 {
		t.Fatalf("%d scripts rendered; want the user data's install script and runcmd and the four SSH commands", len(scripts))
	}
	return scripts
}

// TestShellScripts pipes every shell script chalupa renders into cloud-init
// user data or runs over SSH to shellcheck as POSIX sh (a droplet's
// cloud-init runs /bin/sh; an SSH command runs under the user's login
// shell, which may be dash), with the repository's .shellcheckrc: every
// default check at every severity plus the optional checks it enables.
// contrib/test.sh's lint step checks the repository's own scripts.
func TestShellScripts(t *testing.T) {
	shellcheck := proctest.Shellcheck(t)
	root := proctest.RepoRoot(t)
	for name, script := range renderedScripts(t) {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(shellcheck, "--shell=sh", "-")
			cmd.Dir = root // shellcheck reads the .shellcheckrc of its working directory for stdin
			cmd.Stdin = strings.NewReader(script)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("shellcheck: %v\n%s\n--- the script:\n%s", err, out, script)
			}
		})
	}
}
