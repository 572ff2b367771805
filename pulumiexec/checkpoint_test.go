package pulumiexec_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/pulumiexec/checkpoint"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestCheckpointRoundTrip: up, checkpoint both stacks, then a new engine
// with an empty backend (a restored database on a new droplet) restores
// them from the database; each export equals its checkpoint and a preview
// shows no changes. The environment's ingest key and the provision token
// appear in no checkpoint and no file of either backend.
func TestCheckpointRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	db := storagetest.NewDB(t)
	env := storagetest.Environment(t, db, storage.Environment{Slug: r.spec.EnvironmentSlug})
	sealer, err := envelope.New(bytes.Repeat([]byte{9}, envelope.KeySize), 1)
	if err != nil {
		t.Fatal(err)
	}
	issued, err := ingest.NewKeyring(db, sealer, nil).Issue(ctx, env.Slug)
	if err != nil {
		t.Fatal(err)
	}

	r.run(t, r.spec, pulumiexec.ActionUp, pulumiexec.RunOptions{})
	store := checkpoint.New(db, nil)
	stacks := []string{r.spec.DataStack(), r.spec.ComputeStack()}
	for _, name := range stacks {
		v, err := store.Checkpoint(ctx, r.eng, checkpoint.Ref{OrganizationID: env.OrgID, EnvironmentID: env.ID, Stack: name})
		if err != nil || v != 1 {
			t.Fatalf("checkpoint %s = %d, %v", name, v, err)
		}
	}

	fresh := *r.eng
	fresh.WorkDir = t.TempDir()
	res, err := store.RestoreMissing(ctx, &fresh)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Imported) != 2 || len(res.Kept) != 0 {
		t.Fatalf("restored %+v, want both stacks imported", res)
	}
	for _, name := range stacks {
		cp, err := storage.StackStateByVersion(ctx, db.Read, name, 1)
		if err != nil {
			t.Fatal(err)
		}
		got, ok, err := fresh.ExportStack(ctx, name)
		if err != nil || !ok {
			t.Fatalf("export %s after restore: %v (exists %v)", name, err, ok)
		}
		var a, b any
		if json.Unmarshal(got, &a) != nil || json.Unmarshal(cp.Export, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: the export after restore differs from its checkpoint", name)
		}
	}
	droplets := len(r.api.Droplets())
	pre, err := fresh.Run(ctx, r.spec, pulumiexec.ActionPreview, pulumiexec.RunOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantSteps(t, "preview after restore", pre.Steps, pulumiexec.Steps{Same: 3})
	if n := len(r.api.Droplets()); n != droplets {
		t.Fatalf("%d droplets after restore, want %d", n, droplets)
	}

	// A second start with the restored backend keeps both stacks.
	if res, err := store.RestoreMissing(ctx, &fresh); err != nil || len(res.Kept) != 2 {
		t.Fatalf("second RestoreMissing = %+v, %v; want both kept", res, err)
	}

	secrets := map[string][]byte{"ingest key": []byte(issued.KeyMaterial), "provision token": []byte(provisionToken)}
	cps, err := storage.LatestStackStates(ctx, db.Read)
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range cps {
		for what, s := range secrets {
			if bytes.Contains(cp.Export, s) {
				t.Errorf("the checkpoint of %s carries the %s", cp.Stack, what)
			}
		}
	}
	for _, dir := range []string{r.eng.WorkDir, fresh.WorkDir} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for what, s := range secrets {
				if bytes.Contains(b, s) {
					t.Errorf("%s carries the %s", path, what)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
