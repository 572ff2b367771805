package servercmd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/cli"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
)

// runIn runs the server's commands through cli.Run in process with exactly
// env as the environment and returns the combined output and exit status.
func runIn(env map[string]string, args ...string) (string, int) {
	var out proctest.SyncBuffer
	code := cli.Run(cli.Env{Args: args, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out}, cli.Wiring{Commands: []any{&Commands{}}})
	return out.String(), code
}

// TestServeRefusesNonPositiveLagLimit: `serve --lag-limit 0s` (or negative)
// is a usage mistake, not a request for the default. The configuration
// given is unusable, so a serve that got past the flag would exit 1 at once
// instead of starting.
func TestServeRefusesNonPositiveLagLimit(t *testing.T) {
	t.Parallel()
	env := map[string]string{"CHALUPA_DATA_DIR": t.TempDir(), "CHALUPA_LISTEN": "not-an-address"}
	for _, v := range []string{"0s", "0", "-1m", "999ms"} {
		out, code := runIn(env, "serve", "--lag-limit="+v)
		want := "chalupa: --lag-limit must be positive and at least 1s (lag is measured in seconds)\nusage: chalupa serve [flags]\n"
		if code != cli.ExitUsage || !strings.Contains(out, want) {
			t.Errorf("serve --lag-limit %s: exit %d, want %d with\n%s\ngot:\n%s", v, code, cli.ExitUsage, want, out)
		}
	}
}

// TestServeOnABusyPortTouchesNothing: serve binds its port before it opens
// the data dir, so with the port taken it exits 1 naming CHALUPA_LISTEN and
// leaves the data dir and the replica as they were: no generated secrets, no
// database, nothing replicated.
func TestServeOnABusyPortTouchesNothing(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dataDir := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"CHALUPA_DATA_DIR": dataDir, "CHALUPA_LISTEN": ln.Addr().String()}
	out, code := runIn(env, "serve")
	if code != 1 || !strings.Contains(out, "listen on CHALUPA_LISTEN") {
		t.Fatalf("serve on a busy port: exit %d, want 1 naming CHALUPA_LISTEN:\n%s", code, out)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve on a busy port created its data dir (stat: %v)", err)
	}
}

// TestSecondServeNamesTheLockHolder: a second serve on a data dir another
// process holds (here this test, through storage.LockDataDir) exits 1
// naming the lock and the holder's pid, not the port clash it would also
// meet: the lock is checked before the port is bound (docs/operations.md,
// "Embedded default").
func TestSecondServeNamesTheLockHolder(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dataDir := t.TempDir()
	unlock, err := storage.LockDataDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	env := map[string]string{"CHALUPA_DATA_DIR": dataDir, "CHALUPA_LISTEN": ln.Addr().String()}
	out, code := runIn(env, "serve")
	want := fmt.Sprintf("lock CHALUPA_DATA_DIR: another chalupa process (pid %d) is using this data dir", os.Getpid())
	if code != 1 || !strings.Contains(out, want) || strings.Contains(out, "listen on CHALUPA_LISTEN") {
		t.Fatalf("second serve on a held data dir and a taken port: exit %d, want 1 with %q and no port clash:\n%s", code, want, out)
	}
}
