package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
)

// A data dir made by hand (0755, as an operator does for a restore) ends up
// owner-only, and so does everything the daemon writes in it: the database,
// its WAL and shm, Litestream's LTX files and the file replica.
func TestDataDirIsPrivate(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // not through the umask an in-process daemon sets
		t.Fatal(err)
	}
	env := proctest.NewSecrets()
	env["CHALUPA_DATA_DIR"] = dir
	d := proctest.StartDaemon(t, bin, env)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		if _, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: fmt.Sprintf("perm-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Litestream has written its LTX files and the file replica once the
	// replica confirms every commit.
	testwait.Eventually(t, testwait.Long, "the replica to confirm the writes", func() (bool, string) {
		h, s := e2eReplication(d)
		return h.LagSeconds == 0 && h.RemoteTXID > 0 && !h.Failing, s
	})
	e2eStop(t, d)
	n := 0
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		n++
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v, want owner-only", p, fi.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Fatalf("walked only %d entries; the daemon wrote nothing?", n)
	}
}
