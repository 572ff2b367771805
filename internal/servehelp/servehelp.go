// Package servehelp holds the environment list `chalupa serve --help`
// shows: written from the daemon's variable table (daemon/config_vars.go)
// into environment.txt, which daemon's TestServeHelpEnvironment keeps equal
// to the table (go test ./daemon -run TestServeHelpEnvironment -update
// rewrites it). A leaf, so that a client binary could embed it without
// linking a server package (docs/operations.md, "Configuration").
package servehelp

import _ "embed"

// Environment is the list: a line per variable, its name and what it sets,
// preformatted for kong's detailed help.
//
//go:embed environment.txt
var Environment string
