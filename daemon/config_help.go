package daemon

import (
	"fmt"
	"strings"
)

// serveEnvironmentHelp is serve --help's environment list as the variable
// table writes it (TestServeHelpEnvironment keeps
// internal/servehelp/environment.txt equal to it).
func serveEnvironmentHelp() string {
	rows := newConfig().variables()
	width := 0
	for _, v := range rows {
		width = max(width, len(v.name))
	}
	var b strings.Builder
	b.WriteString("Environment (docs/operations.md, \"Configuration\"; 'chalupa config check' prints the values in force):\n\n")
	for _, v := range rows {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, v.name, v.help)
	}
	return b.String()
}

// VariableNames are the names of the environment variables the daemon
// reads, in the variable table's order (daemon/config_vars.go): for the
// tests that hold the files listing them (contrib/chalupa.env.example, the
// benchmark harness's quota list) to the table.
func VariableNames() []string {
	var out []string
	for _, v := range newConfig().variables() {
		out = append(out, v.name)
	}
	return out
}
