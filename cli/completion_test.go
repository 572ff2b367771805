package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCompletionScripts: `chalupa completion SHELL` prints a script that
// hands the typed line to this binary by its absolute path, for each of
// bash, zsh and fish; another shell is a command-line mistake.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, _ = filepath.Abs(bin)
	rows := []struct{ shell, want string }{
		{"bash", "complete -C " + shellQuote(bin) + " chalupa\n"},
		{"zsh", "bashcompinit\ncomplete -C " + shellQuote(bin) + " chalupa\n"},
		{"fish", "set -lx COMP_LINE (commandline -cp)"},
	}
	for _, r := range rows {
		t.Run(r.shell, func(t *testing.T) {
			t.Parallel()
			out, code := runIn(nil, "", "completion", r.shell)
			if code != 0 || !strings.Contains(out, r.want) {
				t.Fatalf("completion %s: exit %d, want 0 with %q:\n%s", r.shell, code, r.want, out)
			}
		})
	}
	if out, code := runIn(nil, "", "completion", "powershell"); code != ExitUsage {
		t.Fatalf("completion powershell: exit %d, want %d:\n%s", code, ExitUsage, out)
	}
}

// TestCompletionAnswersFromTheCommandTree: what the script does — the shell
// sets COMP_LINE and runs chalupa — lists the subcommands and flags that
// match the word being typed, one a line, and exits 0 without running a
// command. posener/complete reads COMP_LINE from the process, so this test
// sets it there (and is not parallel).
func TestCompletionAnswersFromTheCommandTree(t *testing.T) {
	rows := []struct {
		line string
		want []string
	}{
		{"chalupa ", []string{"admin", "completion", "mcp", "smoke", "version"}},
		{"chalupa ad", []string{"admin"}},
		{"chalupa admin env", []string{"environment"}},
		{"chalupa admin environment ", []string{"create", "list"}},
		{"chalupa admin converge gpu-1 ", []string{"destroy", "preview", "refresh", "up"}},
		{"chalupa admin status --ch", []string{"--check-tokens"}},
		{"chalupa completion ", []string{"bash", "fish", "zsh"}},
	}
	for _, r := range rows {
		t.Run(r.line, func(t *testing.T) {
			t.Setenv("COMP_LINE", r.line)
			t.Setenv("COMP_POINT", "")
			env := map[string]string{"COMP_LINE": r.line}
			out, code := runIn(env, "", "chalupa")
			got := strings.Fields(out)
			for _, w := range r.want {
				if !slices.Contains(got, w) {
					t.Errorf("candidates %q lack %q", got, w)
				}
			}
			if code != 0 {
				t.Fatalf("exit %d, want 0:\n%s", code, out)
			}
		})
	}
}
