package agentcli

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/chalupa-run/chalupa/protocol"
)

// fullTree is the full binary's `chalupa agent` as the root CLI embeds it.
type fullTree struct {
	Agent Cmd `cmd:"" help:"The reference fleet agent."`
}

// help renders `NAME args… --help` of the tree v with kong's help printer
// and returns what it wrote.
func help(t *testing.T, name string, v any, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	exited := false
	p, err := kong.New(v, kong.Name(name), kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Writers(&out, &out), kong.Exit(func(int) { exited = true; panic(exited) }))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != nil && r != true {
				panic(r)
			}
		}()
		if _, err := p.Parse(append(args, "--help")); err != nil {
			t.Fatalf("%s %v --help: %v", name, args, err)
		}
	}()
	if !exited {
		t.Fatalf("%s %v --help did not exit", name, args)
	}
	return out.String()
}

// TestStandaloneHasTheAgentsFlags: every `chalupa agent X` is
// `chalupa-agent X` with the same flags, variables, defaults and help
// (docs/operations.md, "Agent"), and chalupa-agent adds only version.
func TestStandaloneHasTheAgentsFlags(t *testing.T) {
	for _, cmd := range []string{"run", "status", "heartbeat", "report-run", "systemd-unit"} {
		t.Run(cmd, func(t *testing.T) {
			full := help(t, "chalupa", &fullTree{}, "agent", cmd)
			alone := help(t, Name, &Standalone{}, cmd)
			if want := strings.ReplaceAll(full, "chalupa agent "+cmd, Name+" "+cmd); alone != want {
				t.Fatalf("chalupa-agent %s --help differs from chalupa agent %s --help:\n%s\nwant\n%s", cmd, cmd, alone, want)
			}
			if !strings.Contains(full, "Usage: chalupa agent "+cmd) {
				t.Fatalf("help of chalupa agent %s:\n%s", cmd, full)
			}
		})
	}
	p, err := kong.New(&Standalone{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range p.Model.Children {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, " "); got != "run status heartbeat report-run systemd-unit version" {
		t.Fatalf("chalupa-agent commands: %s", got)
	}
}

// TestStandaloneMain: version prints the version and exits 0, the unit runs
// the standalone binary, and command-line mistakes exit ExitUsage with the
// usage line, as `chalupa agent` does (docs/operations.md, "Exit codes").
func TestStandaloneMain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		stderr   []string
		noStdout []string
	}{
		{"version", []string{"version"}, 0, []string{Name + " dev (commit "}, nil, nil},
		{"systemd unit", []string{"systemd-unit"}, 0,
			[]string{"\n" + StandaloneExecStart + "\n", "\n" + StandaloneEnvironmentFile + "\n", "[Install]"}, nil,
			[]string{"/usr/local/bin/chalupa agent", "EnvironmentFile=-"}},
		{"unknown command", []string{"bogus"}, ExitUsage, nil,
			[]string{"chalupa-agent: unexpected argument bogus", "usage: chalupa-agent <command> [flags]", "run 'chalupa-agent --help'"}, nil},
		{"missing flag", []string{"run", "--url", "https://cp.example.com"}, ExitUsage, nil,
			[]string{"missing flags: --env", "usage: chalupa-agent run --url=STRING --env=STRING [flags]"}, nil},
		{"plain http off loopback", []string{"run", "--url", "http://cp.example.com", "--env", "demo"}, ExitUsage, nil,
			[]string{"refusing to send fleet data over plain http", "run 'chalupa-agent run --help'"}, nil},
		{"missing key file", []string{"heartbeat", "--url", "https://cp.example.com", "--key-id", "k", "--key-file", "/nonexistent/ingest.key", "--env", "demo", "--deployment", "d"}, 1, nil,
			[]string{"chalupa-agent: read --key-file"}, []string{"usage:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(tc.args, &stdout, &stderr, func(c int) { panic(fmt.Sprintf("exit %d", c)) })
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, stdout.String(), stderr.String())
			}
			for _, s := range tc.stdout {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
			for _, s := range tc.noStdout {
				if strings.Contains(stdout.String()+stderr.String(), s) {
					t.Errorf("output holds %q", s)
				}
			}
		})
	}
}

// TestFullUnitIsTheTemplate: the full binary's unit is the file itself,
// and the lines the standalone unit rewrites are in it (a template edit
// that drops one fails here, not on a droplet).
func TestFullUnitIsTheTemplate(t *testing.T) {
	u := FullUnit()
	for _, line := range []string{fullExecStart, fullEnvironmentFile} {
		if strings.Count(u, "\n"+line+"\n") != 1 {
			t.Errorf("the unit holds %q %d times, want once", line, strings.Count(u, "\n"+line+"\n"))
		}
	}
	if StandaloneUnit() == u {
		t.Fatal("the standalone unit is the full binary's")
	}
}

// TestCommandsWriteToTheInjectedStreams: the agent's commands print to the
// writers they are given (cli.Run's and Main's), never to the process's
// own: a heartbeat's answer line goes to stdout, its refusal to stderr.
func TestCommandsWriteToTheInjectedStreams(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"error":"invalid_body"}`)
	}))
	defer srv.Close()
	keyFile := filepath.Join(t.TempDir(), "ingest.key")
	if err := os.WriteFile(keyFile, []byte(protocol.NewKeyMaterial()), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main([]string{"heartbeat", "--url", srv.URL, "--key-id", "k1", "--key-file", keyFile,
		"--env", "demo", "--deployment", "d1", "--retries", "0"}, &stdout, &stderr, func(c int) { panic(fmt.Sprintf("exit %d", c)) })
	if code != 1 {
		t.Fatalf("exit %d, want 1; stdout %q stderr %q", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), ` 422 {"error":"invalid_body"}`) {
		t.Errorf("stdout %q lacks the answer line", stdout.String())
	}
	if !strings.Contains(stderr.String(), "heartbeat: refused") {
		t.Errorf("stderr %q lacks the refusal", stderr.String())
	}
}
