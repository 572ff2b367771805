package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// The daemon's shape (docs/architecture.md, "Layout"): handler files hold
// handlers, functions stay short enough to read, and LoadConfig stays a walk
// of the variable table.
const (
	// maxDaemonFuncLines bounds every function of daemon/'s non-test files.
	maxDaemonFuncLines = 80
	// maxLoadConfigLines bounds daemon.LoadConfig: the table and the
	// sections' validate hold the rules, LoadConfig only walks them.
	maxLoadConfigLines = 60
)

// daemonFunc is one function declared in daemon/'s non-test files.
type daemonFunc struct {
	file, name string
	lines      int
}

// daemonFuncs parses daemon/*.go (tests excepted). A function's lines run
// from its func keyword to its closing brace, both included; its doc
// comment does not count.
func daemonFuncs(t *testing.T) []daemonFunc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(proctest.RepoRoot(t), "daemon", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []daemonFunc
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				lines := fset.Position(fd.End()).Line - fset.Position(fd.Type.Func).Line + 1
				out = append(out, daemonFunc{file: filepath.Base(path), name: fd.Name.Name, lines: lines})
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no function found under daemon/")
	}
	return out
}

// TestNoWorkerBuiltInHandlerFiles: a daemon/*_handlers.go file holds the
// handlers of a domain and nothing that builds the workers they call.
// "Builds a worker" is judged simply by name: no function there is named
// new… (workers are built beside their configuration section,
// daemon/config_<section>.go, and assembled by App.open).
func TestNoWorkerBuiltInHandlerFiles(t *testing.T) {
	for _, f := range daemonFuncs(t) {
		if strings.HasSuffix(f.file, "_handlers.go") && strings.HasPrefix(f.name, "new") {
			t.Errorf("daemon/%s declares %s: build workers beside their configuration section (daemon/config_<section>.go), not in a handler file", f.file, f.name)
		}
	}
}

// TestDaemonFunctionLength: no function in daemon/ is over
// maxDaemonFuncLines lines, and LoadConfig is at most maxLoadConfigLines.
func TestDaemonFunctionLength(t *testing.T) {
	found := false
	for _, f := range daemonFuncs(t) {
		if f.name == "LoadConfig" {
			found = true
			if f.lines > maxLoadConfigLines {
				t.Errorf("daemon/%s: LoadConfig is %d lines, at most %d: put a variable's rule in its row or its section's validate", f.file, f.lines, maxLoadConfigLines)
			}
		}
		if f.lines > maxDaemonFuncLines {
			t.Errorf("daemon/%s: %s is %d lines, at most %d: split it where its logic splits", f.file, f.name, f.lines, maxDaemonFuncLines)
		}
	}
	if !found {
		t.Error("daemon.LoadConfig not found")
	}
}
