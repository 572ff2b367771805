package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
)

// sealedDataDir returns a data dir holding a migrated database whose master
// key check value is sealed under masterKey (base64), as a restore leaves
// it: no secrets.env, no replica state.
func sealedDataDir(t *testing.T, masterKey string) string {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	key, err := base64.StdEncoding.DecodeString(masterKey)
	if err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open(ctx, filepath.Join(dir, daemon.DatabaseFileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ingest.OpenSealer(ctx, db, key, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeWithTheWrongMasterKeyWritesNothing: serve on a database sealed
// under key A, given another key, refuses with exit 1 before it writes
// anything: no secrets.env is generated (the file would hold tokens for a
// daemon that never ran, beside a key that opens nothing), an existing one
// is left byte for byte, and the database itself is not migrated, given a
// restore point or replicated.
func TestServeWithTheWrongMasterKeyWritesNothing(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	keyA := proctest.NewSecrets()[proctest.MasterKeyVar]
	keyB := proctest.NewSecrets()[proctest.MasterKeyVar]
	tokens := proctest.NewSecrets()
	cases := []struct {
		name    string
		env     map[string]string // on top of CHALUPA_DATA_DIR and CHALUPA_LISTEN
		secrets string            // secrets.env before serve; "" for none
		want    string
	}{
		// The tokens would be generated into a new secrets.env.
		{"env gives another key", map[string]string{proctest.MasterKeyVar: keyB}, "", "wrong master key"},
		// secrets.env holds another key but no tokens: serve would add them.
		{"secrets.env holds another key", nil, proctest.MasterKeyVar + "=" + keyB + "\n", "wrong master key"},
		{"secrets.env holds another key and both tokens", nil, proctest.MasterKeyVar + "=" + keyB + "\n" +
			proctest.AdminTokenVar + "=" + tokens[proctest.AdminTokenVar] + "\n" +
			proctest.ReadyTokenVar + "=" + tokens[proctest.ReadyTokenVar] + "\n", "wrong master key"},
		{"env gives another key beside a complete secrets.env", map[string]string{proctest.MasterKeyVar: keyB},
			proctest.AdminTokenVar + "=" + tokens[proctest.AdminTokenVar] + "\n", "wrong master key"},
		// No key at all: refused before one is generated.
		{"no key anywhere", nil, "", "CHALUPA_INGEST_MASTER_KEY is unset"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := sealedDataDir(t, keyA)
			secretsPath := filepath.Join(dir, daemon.SecretsFileName)
			if tc.secrets != "" {
				if err := os.WriteFile(secretsPath, []byte(tc.secrets), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			dbPath := filepath.Join(dir, daemon.DatabaseFileName)
			dbBefore, err := os.ReadFile(dbPath)
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"CHALUPA_DATA_DIR": dir, "CHALUPA_LISTEN": proctest.FreeAddr(t)}
			for k, v := range tc.env {
				env[k] = v
			}
			out, code := proctest.RunCommand(t, bin, "", env, "serve")
			if code != 1 || !strings.Contains(out, tc.want) {
				t.Fatalf("serve: exit %d, want 1 with %q:\n%s", code, tc.want, out)
			}
			got, err := os.ReadFile(secretsPath)
			switch {
			case tc.secrets == "" && !errors.Is(err, os.ErrNotExist):
				t.Errorf("serve refused but left a %s behind (%v):\n%s", daemon.SecretsFileName, err, got)
			case tc.secrets != "" && string(got) != tc.secrets:
				t.Errorf("serve refused but changed %s (%v):\n%s", daemon.SecretsFileName, err, got)
			}
			if dbAfter, err := os.ReadFile(dbPath); err != nil || !bytes.Equal(dbAfter, dbBefore) {
				t.Errorf("serve refused but changed %s (%v)", daemon.DatabaseFileName, err)
			}
			for _, name := range []string{"restore-points", "replica", daemon.SecretsFileName + ".tmp"} {
				if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("serve refused but created %s (stat: %v)", name, err)
				}
			}
			for _, s := range []string{keyA, keyB, tokens[proctest.AdminTokenVar], tokens[proctest.ReadyTokenVar]} {
				if strings.Contains(out, s) {
					t.Errorf("the refusal prints a secret:\n%s", out)
				}
			}
		})
	}
}
