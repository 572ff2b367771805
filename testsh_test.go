package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestTestShPhases: every step of contrib/test.sh — each lint step and each
// go test plan — runs through its phase function, which prints a line on
// stderr when the step starts and its time when it ends, or says it
// failed and passes the failure on (docs/architecture.md, "Tests"). The
// function is taken from the script and run by bash; the steps are read
// from the script's text.
func TestTestShPhases(t *testing.T) {
	raw, err := os.ReadFile("contrib/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := string(raw)
	fn := regexp.MustCompile(`(?ms)^phase\(\) \{\n.*?^\}\n`).FindString(script)
	if fn == "" {
		t.Fatal("contrib/test.sh has no phase function")
	}
	t.Run("phase prints start and time", func(t *testing.T) {
		cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+fn+`
phase "a passing step" true
if phase "a failing step" false; then echo "the failure was lost"; fi
`)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("bash: %v\n%s", err, stderr.String())
		}
		if stdout.String() != "" {
			t.Errorf("phase wrote on stdout %q, or lost the failure", stdout.String())
		}
		for _, want := range []string{
			`(?m)^test\.sh: a passing step …$`,
			`(?m)^test\.sh: a passing step: done in [0-9]+s$`,
			`(?m)^test\.sh: a failing step …$`,
			`(?m)^test\.sh: a failing step: FAILED after [0-9]+s$`,
		} {
			if !regexp.MustCompile(want).MatchString(stderr.String()) {
				t.Errorf("no line matching %s on stderr:\n%s", want, stderr.String())
			}
		}
	})
	t.Run("every step is a phase", func(t *testing.T) {
		lint := regexp.MustCompile(`(?ms)^lint\(\) \{\n(.*?)^\}\n`).FindStringSubmatch(script)
		if lint == nil {
			t.Fatal("contrib/test.sh has no lint function")
		}
		steps := 0
		for _, line := range strings.Split(strings.TrimSpace(lint[1]), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if !regexp.MustCompile(`^phase "[^"]+" .+ \|\| exit 1$`).MatchString(line) {
				t.Errorf("lint runs %q outside a phase", line)
			}
			steps++
		}
		for _, step := range []string{"install_tools", "check_gofmt", "go vet", "check_staticcheck", "check_shell"} {
			if !strings.Contains(lint[1], step) {
				t.Errorf("lint has no %s step", step)
			}
		}
		if !regexp.MustCompile(`(?m)^\s*(CGO_ENABLED=\S+ )?phase "go test[^"]*" gotest `).MatchString(script) {
			t.Error("the go test plans do not run through phase")
		}
		if steps < 5 {
			t.Errorf("lint has %d steps", steps)
		}
	})
}
