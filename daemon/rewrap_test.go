package daemon_test

import (
	"context"
	"encoding/base64"
	"path/filepath"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// On the embedded default, a rewrap given the current key through the
// environment (as the README shows) must still move secrets.env to the new
// key, or the next serve reads the old key and refuses to start.
func TestRewrapUpdatesSecretsFileWhenKeyCameFromEnv(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	base := map[string]string{"CHALUPA_DATA_DIR": dir, "CHALUPA_LISTEN": "127.0.0.1:0"}
	cfg, err := daemon.LoadConfig(envFunc(base))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.EnsureSecrets(); err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open(ctx, cfg.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ingest.OpenSealer(ctx, db, cfg.MasterKey(), time.Now()); err != nil {
		t.Fatal(err)
	}
	db.Close()

	old, err := daemon.ReadSecretsFile(filepath.Join(dir, daemon.SecretsFileName))
	if err != nil {
		t.Fatal(err)
	}
	withOld := map[string]string{"CHALUPA_INGEST_MASTER_KEY": old["CHALUPA_INGEST_MASTER_KEY"]}
	for k, v := range base {
		withOld[k] = v
	}
	cfgOld, err := daemon.LoadConfig(envFunc(withOld))
	if err != nil {
		t.Fatal(err)
	}
	newKey := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	rep, err := daemon.RunRewrap(ctx, cfgOld, newKey)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.SecretsFileUpdated {
		t.Fatal("secrets.env was not updated")
	}
	after, err := daemon.ReadSecretsFile(filepath.Join(dir, daemon.SecretsFileName))
	if err != nil {
		t.Fatal(err)
	}
	if after["CHALUPA_INGEST_MASTER_KEY"] != newKey {
		t.Fatal("secrets.env does not hold the new key")
	}
	// The next serve (reading the file) passes the master key check.
	cfgNext, err := daemon.LoadConfig(envFunc(base))
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Preflight(ctx, cfgNext); err != nil {
		t.Fatalf("preflight after rewrap: %v", err)
	}
}
