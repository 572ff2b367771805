package pulumiexec

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver/sshdtest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestRedeliveryRevokesTheKeyACrashLeft: a delivery whose run's result a
// crash lost (the key is on the droplet, the launch was never recorded) is
// followed by the retried up's delivery to the same box's droplet; that
// one revokes the first key, so the environment keeps one active key per
// droplet, the one the droplet holds. Another box's droplet keeps its key
// (docs/operations.md, "SSH key delivery").
func TestRedeliveryRevokesTheKeyACrashLeft(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	env := storagetest.Environment(t, db, storage.Environment{})
	first := storagetest.Box(t, db, storage.Box{EnvironmentSlug: env.Slug})
	other := storagetest.Box(t, db, storage.Box{EnvironmentSlug: env.Slug})
	sealer, err := envelope.New(bytes.Repeat([]byte{9}, envelope.KeySize), 1)
	if err != nil {
		t.Fatal(err)
	}
	clock := clockwork.NewRealClock()
	line, err := sshdeliver.EnsureIdentity(ctx, db, sealer, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	droplet := sshdtest.New(t, sshdtest.NewSigner(t), nil)
	droplet.Root = t.TempDir()
	droplet.Authorize(sshdtest.Authorized(t, line))
	kd := &KeyDelivery{DB: db, Keys: ingest.NewKeyring(db, sealer, nil), Sealer: sealer, Clock: clock, Port: droplet.Port(),
		Log: zerolog.Nop()}
	onDroplet := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(droplet.AgentDir(), "key-id"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	deliver := func(box storage.Box, dropletID int64) string {
		t.Helper()
		if _, err := kd.Deliver(ctx, box, dropletID, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		return onDroplet()
	}
	active := func() []string {
		t.Helper()
		rows, err := db.Read.QueryContext(ctx, `SELECT key_id FROM ingest_keys WHERE environment_id = ? AND status = 'active'`, env.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		sort.Strings(ids)
		return ids
	}

	lost := deliver(first, 101)    // the run that crashed before saving its result
	kept := deliver(other, 202)    // another box's droplet
	current := deliver(first, 101) // the retried up delivers again
	if lost == current {
		t.Fatal("the retried delivery reused the key: the test proves nothing")
	}
	want := []string{kept, current}
	sort.Strings(want)
	if got := active(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("active keys %v, want %v (the droplet's current key and the other box's); the key the crash left is %s", got, want, lost)
	}
	if k, err := storage.IngestKeyByID(ctx, db.Read, lost); err != nil || k.Status != storage.KeyRevoked {
		t.Errorf("the key the crash left is %q (%v); want revoked", k.Status, err)
	}
}
