package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
)

// TestForeignReplicaRefusalLeavesDataDir: serve on a data dir with no
// database, pointed at a replica that holds another database's history, is
// refused (ErrReplicaForeign) and leaves the filesystem as it found it
// (docs/operations.md, "Backup and restore"): a data dir the start made is
// gone, one that existed empty stays empty — no chalupa.lock, and no
// secrets.env although the embedded default's secrets were missing.
func TestForeignReplicaRefusalLeavesDataDir(t *testing.T) {
	first := daemontest.NewInProcess(t, daemontest.AppOptions{})
	replica := first.Env["CHALUPA_REPLICA_URL"]
	first.Close()

	for _, tc := range []struct {
		name   string
		exists bool
	}{{"data dir made by the start", false}, {"empty data dir that existed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "made", "data")
			if tc.exists {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			env := map[string]string{"CHALUPA_DATA_DIR": dir, "CHALUPA_LISTEN": "127.0.0.1:0", "CHALUPA_REPLICA_URL": replica,
				proctest.MinFreeBytesVar: "0"}
			cfg, err := daemon.LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Secrets.Generated) == 0 {
				t.Fatal("no secrets to generate: the test would not see a secrets.env written before the refusal")
			}
			app, err := daemon.Open(context.Background(), cfg, daemon.Options{Logs: &proctest.SyncBuffer{}})
			if !errors.Is(err, storage.ErrReplicaForeign) {
				if app != nil {
					app.Close(context.Background())
				}
				t.Fatalf("Open on a foreign replica: %v, want ErrReplicaForeign", err)
			}
			if !tc.exists {
				if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the data dir (and the parent the start made) remain after the refusal: %v", err)
				}
				return
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatalf("the data dir that existed is gone: %v", err)
			}
			for _, e := range entries {
				t.Errorf("the refusal left %s in the data dir", e.Name())
			}
		})
	}
}
