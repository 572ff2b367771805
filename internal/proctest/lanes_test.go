package proctest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// laneChildEnv marks this test binary run again as the child of the lane
// tests below; the child tests skip without it.
const laneChildEnv = "CHALUPA_PROCTEST_LANE_CHILD"

// laneRows are the helpers whose work belongs to the full run
// (fullRun: skipped under FastLaneFlag) and one that stays in the fast
// lane. A helper that did not skip would do its work and fail on the
// made-up paths, so no row builds or runs anything.
var laneRows = []struct {
	name    string
	fullRun bool
	call    func(t testing.TB)
}{
	{"BuildBinary", true, func(t testing.TB) { BuildBinary(t) }},
	{"BuildWithheld", true, func(t testing.TB) { BuildWithheld(t, 1) }},
	{"PulumiHome", true, func(t testing.TB) { PulumiHome(t, "/nonexistent/pulumi", "0.0.0") }},
	{"Restore", true, func(t testing.TB) { Restore(t, "/nonexistent/litestream", "file:///nonexistent", nil) }},
	{"ToolPath/litestream", true, func(t testing.TB) { ToolPath(t, "litestream") }},
	{"ToolPath/pulumi", true, func(t testing.TB) { ToolPath(t, "pulumi") }},
	{"Chromium", true, func(t testing.TB) { Chromium(t) }},
	{"FullRunOnly", true, func(t testing.TB) { FullRunOnly(t, "a test's own heavy step") }},
	// versitygw stays in the fast lane: its skip, if any, is the
	// not-installed one, never FastLaneFlag's.
	{"ToolPath/versitygw", false, func(t testing.TB) { ToolPath(t, "versitygw") }},
}

// skipRecorder passes everything to the test but remembers a skip's message,
// which the child prints for its parent to read.
type skipRecorder struct {
	testing.TB
	msg *string
}

func (r skipRecorder) Skip(args ...any) { *r.msg = fmt.Sprint(args...); r.TB.SkipNow() }
func (r skipRecorder) Skipf(format string, args ...any) {
	*r.msg = fmt.Sprintf(format, args...)
	r.TB.SkipNow()
}

// TestLaneChild calls each laneRows helper and prints "lane-row NAME: MSG"
// with the message of its skip ("" when it ran). It runs only as the
// child of TestFastLaneSkipsFullRunHelpers.
func TestLaneChild(t *testing.T) {
	if os.Getenv(laneChildEnv) == "" {
		t.Skip("child of TestFastLaneSkipsFullRunHelpers")
	}
	for _, r := range laneRows {
		t.Run(r.name, func(t *testing.T) {
			var msg string
			t.Cleanup(func() { fmt.Printf("lane-row %s: %q\n", r.name, msg) })
			r.call(skipRecorder{TB: t, msg: &msg})
		})
	}
}

// runLaneChild runs this test binary again with args and the environment
// plus env, and returns its output and exit error.
func runLaneChild(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.count=1", "-test.v"}, args...)...)
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CI=") })
	cmd.Env = append(append(base, laneChildEnv+"=1"), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestFastLaneSkipsFullRunHelpers: under -short (contrib/test.sh --fast)
// every helper that builds the binary or runs pulumi, Chromium or
// litestream restore skips its test with FastLaneFlag's message, and
// versitygw's ToolPath does not, even under CI=true: the fast lane is
// partial by design, and the full run never passes -short.
func TestFastLaneSkipsFullRunHelpers(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			// The child's exit status is not the verdict: a missing
			// versitygw fails it under CI=true, as it should; each row's
			// printed skip message is.
			out, err := runLaneChild(t, []string{"CI=" + ci}, "-test.short", "-test.run=^TestLaneChild$")
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("child: %v", err)
			}
			for _, r := range laneRows {
				prefix := "lane-row " + r.name + ": "
				i := strings.Index(out, prefix)
				if i < 0 {
					t.Errorf("%s: the child printed no result\n%s", r.name, out)
					continue
				}
				line, _, _ := strings.Cut(out[i+len(prefix):], "\n")
				short := strings.HasPrefix(line, `"`+FastLaneFlag+": ")
				if short != r.fullRun {
					t.Errorf("%s under %s: skip message %s; want a %s skip: %v", r.name, FastLaneFlag, line, FastLaneFlag, r.fullRun)
				}
			}
		})
	}
}

// TestLaneChildMissingTool asks ToolPath for a tool that is never installed.
// It runs only as the child of TestMissingToolFailsUnderCI.
func TestLaneChildMissingTool(t *testing.T) {
	if os.Getenv(laneChildEnv) == "" {
		t.Skip("child of TestMissingToolFailsUnderCI")
	}
	ToolPath(t, "chalupa-no-such-tool")
	t.Error("ToolPath returned a path for a tool that does not exist")
}

// TestMissingToolFailsUnderCI: outside the fast lane a missing tool skips
// its test on a workstation and fails it under CI=true, so a CI run
// missing a tool cannot pass.
func TestMissingToolFailsUnderCI(t *testing.T) {
	for _, tc := range []struct {
		ci       string
		wantFail bool
	}{{"", false}, {"true", true}} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			out, err := runLaneChild(t, []string{"CI=" + tc.ci}, "-test.run=^TestLaneChildMissingTool$")
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("child: %v", err)
			}
			if failed := err != nil; failed != tc.wantFail {
				t.Fatalf("child failed: %v; want %v\n%s", failed, tc.wantFail, out)
			}
			want := "--- SKIP: TestLaneChildMissingTool"
			if tc.wantFail {
				want = "CI=true: a missing tool fails the run"
			}
			if !strings.Contains(out, want) {
				t.Errorf("child output lacks %q:\n%s", want, out)
			}
		})
	}
}
