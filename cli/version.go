package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/alecthomas/kong"

	"github.com/chalupa-run/chalupa/internal/buildinfo"
)

type versionCmd struct {
	JSON bool `name:"json" help:"Print version, commit, Go version and Litestream version as JSON."`
}

// versionInfo is what `chalupa version --json` prints.
type versionInfo struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	Modified   bool   `json:"modified"`
	Go         string `json:"go"`
	Litestream string `json:"litestream"`
	Platform   string `json:"platform"`
}

// buildInfo reads the commit Go stamped into the binary (-buildvcs, the
// default in a git checkout); "unknown" when built outside one.
func buildInfo() versionInfo {
	v := versionInfo{Version: buildinfo.Version, Commit: "unknown", Go: runtime.Version(),
		Litestream: buildinfo.LitestreamVersion, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	return v
}

// Run prints the version.
func (c versionCmd) Run(env *Env) error {
	v := buildInfo()
	if c.JSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	printVersion(env.Stdout, v)
	return nil
}

// versionFlag is `chalupa --version`: it prints what `chalupa version`
// prints and exits 0 before anything else is parsed or run.
type versionFlag bool

// BeforeReset prints the version line and exits (kong calls it when the
// flag is on the command line, as its own VersionFlag does).
func (versionFlag) BeforeReset(app *kong.Kong) error {
	printVersion(app.Stdout, buildInfo())
	app.Exit(0)
	return nil
}

// printVersion writes the one-line version of v.
func printVersion(w io.Writer, v versionInfo) {
	commit := v.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if v.Modified {
		commit += "+modified"
	}
	fmt.Fprintf(w, "chalupa %s (commit %s, %s, litestream %s, %s)\n", v.Version, commit, v.Go, v.Litestream, v.Platform)
}
