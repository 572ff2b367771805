package daemon_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
)

// On the embedded default, a rewrap given the current key through the
// environment (as the README shows) must still move secrets.env to the new
// key, or the next serve reads the old key and refuses to start.
func TestRewrapUpdatesSecretsFileWhenKeyCameFromEnv(t *testing.T) {
	ctx := context.Background()
	dir, base, _, db := sealedEmbeddedDefault(t)
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
	rep, err := daemon.RunRewrap(ctx, cfgOld, newKey, nil)
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

// A rewrap stopped after its commit but before secrets.env followed (the
// file holds the old key and the pending new one): serve's recovery makes
// the pending key current, and re-running the same rewrap finishes instead
// of failing.
func TestRewrapInterruptedAfterCommit(t *testing.T) {
	ctx := context.Background()
	dir, base, cfg, db := sealedEmbeddedDefault(t)
	// Simulate the crash: the commit happened, the file was not updated
	// beyond the pending entry.
	newKey := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	newRaw, _ := base64.StdEncoding.DecodeString(newKey)
	if _, err := ingest.Rewrap(ctx, db, cfg.MasterKey(), newRaw, time.Now()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	path := filepath.Join(dir, daemon.SecretsFileName)
	m, _ := daemon.ReadSecretsFile(path)
	oldKey := m["CHALUPA_INGEST_MASTER_KEY"]
	body := "CHALUPA_ADMIN_TOKEN=" + m["CHALUPA_ADMIN_TOKEN"] + "\nCHALUPA_READY_TOKEN=" + m["CHALUPA_READY_TOKEN"] +
		"\nCHALUPA_INGEST_MASTER_KEY=" + oldKey + "\nCHALUPA_INGEST_MASTER_KEY_PENDING=" + newKey + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	// config check accepts it (serve will finish the rewrap) ...
	cfg2, err := daemon.LoadConfig(envFunc(base))
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Preflight(ctx, cfg2); err != nil {
		t.Fatalf("preflight with a pending rewrap: %v", err)
	}
	// ... and serve finishes it: it starts, and the file then holds the
	// pending key as the current one.
	pending, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(rctx, cfg2, daemon.RunOptions{Logs: io.Discard, Listening: func(string) { cancel() }})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve with a pending rewrap: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve with a pending rewrap did not start and stop")
	}
	served, _ := daemon.ReadSecretsFile(path)
	if served["CHALUPA_INGEST_MASTER_KEY"] != newKey || served["CHALUPA_INGEST_MASTER_KEY_PENDING"] != "" {
		t.Fatal("serve did not make the pending key current")
	}
	// Put the interrupted state back for the re-run below.
	if err := os.WriteFile(path, pending, 0o600); err != nil {
		t.Fatal(err)
	}
	// ... and re-running the rewrap with the old key in the environment
	// finishes it: the file now holds the new key.
	withOld := map[string]string{"CHALUPA_INGEST_MASTER_KEY": oldKey}
	for k, v := range base {
		withOld[k] = v
	}
	cfg3, err := daemon.LoadConfig(envFunc(withOld))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := daemon.RunRewrap(ctx, cfg3, newKey, nil)
	if err != nil {
		t.Fatalf("re-run of an interrupted rewrap: %v", err)
	}
	if !rep.AlreadyDone || !rep.SecretsFileUpdated {
		t.Fatalf("report %+v, want AlreadyDone and SecretsFileUpdated", rep)
	}
	after, _ := daemon.ReadSecretsFile(path)
	if after["CHALUPA_INGEST_MASTER_KEY"] != newKey || after["CHALUPA_INGEST_MASTER_KEY_PENDING"] != "" {
		t.Fatalf("secrets.env after finishing: key updated=%v pending left=%v", after["CHALUPA_INGEST_MASTER_KEY"] == newKey, after["CHALUPA_INGEST_MASTER_KEY_PENDING"] != "")
	}
}

// sealedEmbeddedDefault makes an embedded-default data dir (generated
// secrets.env) whose migrated database holds a master key check value, and
// returns the dir, its environment, the config and the open database.
func sealedEmbeddedDefault(t *testing.T) (string, map[string]string, *daemon.Config, *storage.DB) {
	t.Helper()
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
	return dir, base, cfg, db
}

// TestRewrapRefusesMissingDatabase: rewrap pointed at a data dir without a
// database (a wrong or unset CHALUPA_DATA_DIR) refuses with ErrNoDatabase
// and creates nothing: no database file, and no replication is started, so
// the replica of the real database is untouched.
func TestRewrapRefusesMissingDatabase(t *testing.T) {
	dataDir := t.TempDir()
	replica := filepath.Join(t.TempDir(), "replica")
	env := proctest.NewSecrets()
	env["CHALUPA_DATA_DIR"] = dataDir
	env["CHALUPA_REPLICA_URL"] = "file://" + replica
	cfg, err := daemon.LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	_, err = daemon.RunRewrap(context.Background(), cfg, proctest.NewSecrets()[proctest.MasterKeyVar], nil)
	if !errors.Is(err, daemon.ErrNoDatabase) {
		t.Fatalf("RunRewrap on an empty data dir = %v, want ErrNoDatabase", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, daemon.DatabaseFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rewrap created %s (stat: %v)", daemon.DatabaseFileName, err)
	}
	if _, err := os.Stat(replica); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rewrap touched the replica (stat: %v)", err)
	}
}

// TestRewrapCoversProviderTokens: rewrap re-encrypts customer provider
// token envelopes too: afterwards the new key opens them and the old one
// does not, whatever the token's status.
func TestRewrapCoversProviderTokens(t *testing.T) {
	ctx := context.Background()
	_, _, cfg, db := sealedEmbeddedDefault(t)
	oldSealer, err := ingest.OpenSealer(ctx, db, cfg.MasterKey(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	orgs := map[string]int64{}
	for _, slug := range []string{"acme", "globex"} {
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			o, err := storage.CreateOrganization(ctx, tx, slug, slug, time.Now())
			orgs[slug] = o.ID
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := ingest.NewProviderTokens(db, oldSealer, nil).Set(ctx, slug, []byte("dop_v1_"+slug)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ingest.NewProviderTokens(db, oldSealer, nil).Revoke(ctx, "globex"); err != nil {
		t.Fatal(err)
	}
	newRaw := []byte("0123456789abcdef0123456789abcdef")
	res, err := ingest.Rewrap(ctx, db, cfg.MasterKey(), newRaw, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.ProviderTokens != 2 {
		t.Fatalf("rewrapped %d provider tokens, want 2", res.ProviderTokens)
	}
	newSealer, err := ingest.OpenSealer(ctx, db, newRaw, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := ingest.NewProviderTokens(db, newSealer, nil).Active(ctx, orgs["acme"])
	if err != nil || string(tok) != "dop_v1_acme" {
		t.Fatalf("after rewrap the new key opens %q, %v; want the stored token", tok, err)
	}
	if _, _, err := ingest.NewProviderTokens(db, oldSealer, nil).Active(ctx, orgs["acme"]); err == nil {
		t.Fatal("the old master key still opens a rewrapped provider token")
	}
	revoked, err := storage.ProviderTokenByOrg(ctx, db.Read, orgs["globex"])
	if err != nil {
		t.Fatal(err)
	}
	if revoked.MasterKeyVersion != newSealer.Version() {
		t.Fatalf("revoked token at master key version %d, want %d", revoked.MasterKeyVersion, newSealer.Version())
	}
}

// TestRewrapCoversSSHIdentity: rewrap re-seals the key delivery's SSH
// identity too: afterwards the new master key opens it (the same public
// key, so live droplets still accept it) and the old one does not.
func TestRewrapCoversSSHIdentity(t *testing.T) {
	ctx := context.Background()
	_, _, cfg, db := sealedEmbeddedDefault(t)
	oldSealer, err := ingest.OpenSealer(ctx, db, cfg.MasterKey(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pub, err := sshdeliver.EnsureIdentity(ctx, db, oldSealer, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	newRaw := []byte("0123456789abcdef0123456789abcdef")
	res, err := ingest.Rewrap(ctx, db, cfg.MasterKey(), newRaw, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.SSHIdentities != 1 {
		t.Fatalf("rewrapped %d SSH identities, want 1", res.SSHIdentities)
	}
	newSealer, err := ingest.OpenSealer(ctx, db, newRaw, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	signer, err := sshdeliver.Signer(ctx, db.Read, newSealer)
	if err != nil {
		t.Fatalf("the new master key does not open the rewrapped SSH identity: %v", err)
	}
	if !strings.HasPrefix(pub, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))+" ") {
		t.Fatal("the rewrapped identity has another public key")
	}
	if _, err := sshdeliver.Signer(ctx, db.Read, oldSealer); !errors.Is(err, sshdeliver.ErrIdentityCorrupt) {
		t.Fatalf("the old master key on the rewrapped identity = %v, want ErrIdentityCorrupt", err)
	}
}
