package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/willabides/kongplete"
)

// completionCmd is `chalupa completion bash|zsh|fish`: it prints the
// shell's completion script. The script hands the line being typed back to
// this binary (COMP_LINE), which answers from its own command tree through
// kongplete, so subcommands and flags never go stale (docs/operations.md,
// "Shell completion").
type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"The shell: bash, zsh or fish."`
}

// Help is completion's examples.
func (*completionCmd) Help() string {
	return `Examples:
  source <(chalupa completion bash)                 this bash session
  chalupa completion bash > ~/.local/share/bash-completion/completions/chalupa
  chalupa completion zsh >> ~/.zshrc                zsh (bashcompinit)
  chalupa completion fish > ~/.config/fish/completions/chalupa.fish`
}

// completionScripts are the scripts by shell, after kongplete's
// (InstallCompletions): ${bin} is this binary's absolute path, ${cmd} the
// command completed. Each sets COMP_LINE and runs ${bin}, whose answer is
// one candidate a line.
var completionScripts = map[string]string{
	"bash": "complete -C ${bin} ${cmd}\n",
	"zsh":  "autoload -U +X bashcompinit && bashcompinit\ncomplete -C ${bin} ${cmd}\n",
	"fish": `function __complete_${cmd}
    set -lx COMP_LINE (commandline -cp)
    test -z (commandline -ct)
    and set COMP_LINE "$COMP_LINE "
    ${bin}
end
complete -f -c ${cmd} -a "(__complete_${cmd})"
`,
}

// Run prints the script for c.Shell, naming this binary by its absolute
// path (a binary moved later needs the script printed again).
func (c *completionCmd) Run(env *Env) error {
	bin, err := os.Executable()
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err != nil {
		return Exit(1, fmt.Errorf("cannot find this binary's path for the script: %w", err))
	}
	vars := map[string]string{"cmd": "chalupa", "bin": shellQuote(bin)}
	_, err = fmt.Fprint(env.Stdout, os.Expand(completionScripts[c.Shell], func(s string) string {
		if v, ok := vars[s]; ok {
			return v
		}
		return "$" + s
	}))
	return err
}

// shellQuote is s single-quoted for sh, bash, zsh and fish when it holds
// anything but letters, digits and /._-.
func shellQuote(s string) string {
	if strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// completeLine answers a completion request, a line the shell's script
// hands over in COMP_LINE (and COMP_POINT), with the candidates from the
// command tree, one a line, and exits 0 through kong's exit; without
// COMP_LINE it returns and the command line is parsed as usual.
func completeLine(env *Env, parser *kong.Kong) {
	if line, ok := env.LookupEnv("COMP_LINE"); !ok || line == "" {
		return
	}
	kongplete.Complete(parser, kongplete.WithErrorHandler(func(err error) {
		fmt.Fprintln(env.Stderr, "chalupa: completion:", err)
	}))
}
