package proctest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	pulumiOnce sync.Once
	pulumiHome string
	pulumiErr  error
)

// PulumiHome builds the converge test provider (pulumiexec/internal/
// testprovider) once per test process and installs it, as the digitalocean
// plugin at providerVersion (pass pulumiexec.ProviderVersion: this package
// imports no chalupa server package), into a PULUMI_HOME made with
// os.MkdirTemp (shared by the process's tests; directories left by earlier
// runs more than an hour old are removed, as BuildBinary's are). cli is the
// pulumi CLI (ToolPath(t, "pulumi")). A failed build or install fails
// every caller with its output (docs/operations.md, "Converge"). Under
// FastLaneFlag it skips the test instead.
func PulumiHome(t testing.TB, cli, providerVersion string) string {
	t.Helper()
	FullRunOnly(t, "runs the pulumi CLI")
	root := RepoRoot(t)
	pulumiOnce.Do(func() {
		pruneOldBinDirs()
		dir, err := os.MkdirTemp("", binDirPrefix+"pulumi-home-")
		if err != nil {
			pulumiErr = err
			return
		}
		bin := filepath.Join(dir, "pulumi-resource-digitalocean")
		build := exec.Command("go", "build", "-o", bin, "./pulumiexec/internal/testprovider")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			pulumiErr = errors.New("build the test provider: " + string(out))
			return
		}
		inst := exec.Command(cli, "plugin", "install", "resource", "digitalocean", providerVersion, "--file", bin)
		inst.Env = append(os.Environ(), "PULUMI_HOME="+dir, "PULUMI_SKIP_UPDATE_CHECK=true")
		if out, err := inst.CombinedOutput(); err != nil {
			pulumiErr = errors.New("install the test provider: " + string(out))
			return
		}
		pulumiHome = dir
	})
	if pulumiErr != nil {
		t.Fatalf("proctest: %v", pulumiErr)
	}
	return pulumiHome
}
