package servercmd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/cli"
	"github.com/chalupa-run/chalupa/internal/datadir"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// runStreams runs the server's commands through cli.Run in process with
// exactly env as the environment and stdin as standard input, and returns
// standard output and standard error apart, and the exit status.
func runStreams(env map[string]string, stdin string, args ...string) (stdout, stderr string, code int) {
	var out, errOut proctest.SyncBuffer
	code = cli.Run(cli.Env{Args: args, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut}, cli.Wiring{Commands: []any{&Commands{}}})
	return out.String(), errOut.String(), code
}

// TestMigrateStatusWritesToTheInjectedStdout: `migrate status` lists the
// migrations, as a table and as JSON, on the standard output cli.Run was
// given (a database not created yet: every migration pending).
func TestMigrateStatusWritesToTheInjectedStdout(t *testing.T) {
	t.Parallel()
	env := map[string]string{"CHALUPA_DATA_DIR": t.TempDir()}
	t.Run("table", func(t *testing.T) {
		out, errOut, code := runStreams(env, "", "migrate", "status")
		if code != 0 || !strings.HasPrefix(out, "VERSION") || !strings.Contains(out, "pending") {
			t.Fatalf("exit %d, want 0 with the table on stdout\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
	t.Run("json", func(t *testing.T) {
		out, errOut, code := runStreams(env, "", "migrate", "status", "--json")
		var sts []storage.MigrationStatus
		if err := json.Unmarshal([]byte(out), &sts); code != 0 || err != nil || len(sts) == 0 || sts[0].Applied {
			t.Fatalf("exit %d (%v), want 0 with pending migrations as JSON on stdout\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
		}
	})
}

// TestConfigCheckWritesToTheInjectedStdout: `config check` prints the
// redacted configuration and its verdict, as a table and as JSON, on the
// standard output cli.Run was given.
func TestConfigCheckWritesToTheInjectedStdout(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	env := map[string]string{"CHALUPA_DATA_DIR": dataDir}
	t.Run("table", func(t *testing.T) {
		out, errOut, code := runStreams(env, "", "config", "check")
		if code != 0 || !strings.Contains(out, "CHALUPA_DATA_DIR") || !strings.HasSuffix(out, "configuration ok\n") {
			t.Fatalf("exit %d, want 0 with the configuration and its verdict on stdout\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
	t.Run("json", func(t *testing.T) {
		out, errOut, code := runStreams(env, "", "config", "check", "--json")
		var m map[string]string
		if err := json.Unmarshal([]byte(out), &m); code != 0 || err != nil || m["CHALUPA_DATA_DIR"] != dataDir {
			t.Fatalf("exit %d (%v), want 0 with the configuration as JSON on stdout\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
		}
	})
}

// TestRollbackWritesToTheInjectedStreams: `migrate restore-points` lists
// the point (table and JSON); `migrate rollback` prints its plan on the
// injected stdout, asks for the phrase on the injected stderr and reads it
// from the injected stdin (a wrong one changes nothing), and says what it
// did on stdout once given the phrase.
func TestRollbackWritesToTheInjectedStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dataDir := t.TempDir()
	dbPath := filepath.Join(dataDir, datadir.DatabaseFileName)
	db, err := storage.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{Logger: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	version, err := db.SchemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// A restore point as Migrate names it: a copy of the database before
	// the environment below was made.
	name := fmt.Sprintf("chalupa-20260102T030405.000Z-v%d.db", version)
	point := filepath.Join(dataDir, storage.RestorePointDirName, name)
	b, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(point), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(point, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if db, err = storage.Open(ctx, dbPath); err != nil {
		t.Fatal(err)
	}
	storagetest.Environment(t, db, storage.Environment{Slug: "after-the-point", Name: "made after the restore point"})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CHALUPA_DATA_DIR": dataDir}

	t.Run("restore-points", func(t *testing.T) {
		out, errOut, code := runStreams(env, "", "migrate", "restore-points")
		if code != 0 || !strings.HasPrefix(out, "NAME") || !strings.Contains(out, name) {
			t.Fatalf("exit %d, want 0 with the point listed on stdout\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		out, errOut, code = runStreams(env, "", "migrate", "restore-points", "--json")
		var pts []restorePointJSON
		if err := json.Unmarshal([]byte(out), &pts); code != 0 || err != nil || len(pts) != 1 || pts[0].Name != name || !pts[0].Verified {
			t.Fatalf("exit %d (%v), want 0 with the verified point as JSON on stdout\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
		}
	})
	t.Run("plan and a wrong phrase", func(t *testing.T) {
		out, errOut, code := runStreams(env, "roll back to somewhere else\n", "migrate", "rollback", "--to", name)
		if code != 1 || !strings.Contains(out, "restore point "+name) || !strings.Contains(out, "environments") {
			t.Errorf("exit %d, want 1 with the plan (the environments table's loss) on stdout\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		if !strings.Contains(errOut, fmt.Sprintf("type %q to roll back", rollbackPhrase(name))) || !strings.Contains(errOut, "nothing changed") {
			t.Errorf("stderr lacks the prompt and the refusal:\n%s", errOut)
		}
		if _, err := os.Stat(filepath.Join(dataDir, storage.RolledBackDirName)); !os.IsNotExist(err) {
			t.Errorf("a refused rollback moved the database aside (stat: %v)", err)
		}
	})
	t.Run("empty stdin", func(t *testing.T) {
		_, errOut, code := runStreams(env, "", "migrate", "rollback", "--to", name)
		if code != 1 || !strings.Contains(errOut, "standard input ended before the confirmation phrase") || !strings.Contains(errOut, "nothing changed") {
			t.Errorf("exit %d, want 1 saying standard input ended\nstderr:\n%s", code, errOut)
		}
		if _, err := os.Stat(filepath.Join(dataDir, storage.RolledBackDirName)); !os.IsNotExist(err) {
			t.Errorf("a refused rollback moved the database aside (stat: %v)", err)
		}
	})
	t.Run("the phrase from stdin", func(t *testing.T) {
		out, errOut, code := runStreams(env, rollbackPhrase(name)+"\n", "migrate", "rollback", "--to", name)
		if code != 0 || !strings.Contains(out, "rolled back to "+name) || !strings.Contains(out, "previous database moved to") {
			t.Fatalf("exit %d, want 0 saying what it did on stdout\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
}

// TestRollbackNamesTheLockHolder: `migrate rollback` on a data dir another
// process holds refuses, exit 1, naming the holder's pid as the lock file
// records it (what serve's refusal says too), and changes nothing
// (docs/operations.md, "Rollback").
func TestRollbackNamesTheLockHolder(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	// This process holds the lock: flock refuses a second open file of
	// the same process as it refuses another process.
	unlock, err := storage.LockDataDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	env := map[string]string{"CHALUPA_DATA_DIR": dataDir}
	_, errOut, code := runStreams(env, "", "migrate", "rollback", "--to", "chalupa-20260102T030405.000Z-v1.db")
	want := fmt.Sprintf("the database is in use by pid %d (", os.Getpid())
	if code != 1 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "nothing changed") {
		t.Fatalf("exit %d, want 1 saying %q and nothing changed:\n%s", code, want, errOut)
	}
}
