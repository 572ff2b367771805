package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/pulumiexec/checkpoint"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// memBackend is a state backend in memory; failImport makes the next
// imports fail (an import interrupted by a crash), mangle makes them store
// something else (an import that does not verify).
type memBackend struct {
	stacks     map[string][]byte
	failImport bool
	mangle     bool
	imports    int
}

func (m *memBackend) ExportStack(_ context.Context, name string) ([]byte, bool, error) {
	b, ok := m.stacks[name]
	return b, ok, nil
}

func (m *memBackend) ImportStack(_ context.Context, name string, export []byte) error {
	m.imports++
	if m.failImport {
		return errors.New("killed")
	}
	if m.mangle {
		export = []byte(`{"version":3,"deployment":{"resources":[]}}`)
	}
	m.stacks[name] = append([]byte(nil), export...)
	return nil
}

type rig struct {
	db    *storage.DB
	store *checkpoint.Store
	ref   checkpoint.Ref
}

func newRig(t *testing.T) rig {
	db := storagetest.NewDB(t)
	env := storagetest.Environment(t, db, storage.Environment{})
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	return rig{db: db, store: checkpoint.New(db, clock),
		ref: checkpoint.Ref{OrganizationID: env.OrgID, EnvironmentID: env.ID, Stack: "box-1-compute"}}
}

const exportV1 = `{"version":3,"deployment":{"resources":[{"urn":"urn:pulumi:box-1-compute::chalupa::digitalocean:index/droplet:Droplet::box-1","id":"101"}]}}`

func TestSaveVersionsIncrease(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	for want := int64(1); want <= 3; want++ {
		v, err := r.store.Save(ctx, r.ref, []byte(exportV1))
		if err != nil || v != want {
			t.Fatalf("Save = %d, %v; want version %d", v, err, want)
		}
	}
	other := r.ref
	other.Stack = "box-1-data"
	if v, err := r.store.Save(ctx, other, []byte(exportV1)); err != nil || v != 1 {
		t.Fatalf("first save of another stack = %d, %v; want version 1", v, err)
	}
}

func TestSaveRefusesOversizedAndEmptyExports(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	pad := func(n int) []byte {
		b := []byte(`{"pad":"`)
		b = append(b, bytes.Repeat([]byte("x"), n-len(b)-2)...)
		return append(b, '"', '}')
	}
	for _, tc := range []struct {
		name   string
		export []byte
		want   error
	}{
		{"exactly 4 MiB", pad(checkpoint.MaxExportBytes), nil},
		{"one byte over", pad(checkpoint.MaxExportBytes + 1), checkpoint.ErrTooLarge},
		{"empty", nil, checkpoint.ErrEmpty},
		{"not JSON", []byte("state"), checkpoint.ErrEmpty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := storage.LatestStackStates(ctx, r.db.Read)
			_, err := r.store.Save(ctx, r.ref, tc.export)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Save = %v, want %v", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "xxxx") {
				t.Fatal("the error carries export content")
			}
			after, _ := storage.LatestStackStates(ctx, r.db.Read)
			if stored := len(after) > 0 && (len(before) == 0 || after[0].Version > before[0].Version); stored != (tc.want == nil) {
				t.Fatalf("stored a version: %v, want %v", stored, tc.want == nil)
			}
		})
	}
}

func TestRestoreMissingImportsOnlyMissingStacks(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	data := r.ref
	data.Stack = "box-1-data"
	if _, err := r.store.Save(ctx, r.ref, []byte(`{"version":3,"deployment":{"old":true}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Save(ctx, r.ref, []byte(exportV1)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Save(ctx, data, []byte(exportV1)); err != nil {
		t.Fatal(err)
	}
	existing := []byte(`{"version":3,"deployment":{"mine":true}}`)
	b := &memBackend{stacks: map[string][]byte{"box-1-data": existing}}
	res, err := r.store.RestoreMissing(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Imported, ",") != "box-1-compute" || strings.Join(res.Kept, ",") != "box-1-data" {
		t.Fatalf("restored %+v; want compute imported and data kept", res)
	}
	if string(b.stacks["box-1-compute"]) != exportV1 {
		t.Fatalf("compute imported from %s, want the newest checkpoint", b.stacks["box-1-compute"])
	}
	if !bytes.Equal(b.stacks["box-1-data"], existing) {
		t.Fatal("an existing stack was overwritten")
	}
	// A second start finds everything present and imports nothing.
	n := b.imports
	if res, err := r.store.RestoreMissing(ctx, b); err != nil || len(res.Imported) != 0 || b.imports != n {
		t.Fatalf("second RestoreMissing = %+v, %v; want nothing imported", res, err)
	}
}

// An import killed midway leaves its marker: uploads of that stack are
// refused (nothing stored) until a later RestoreMissing finishes and
// verifies the import; an import that does not verify keeps the marker.
func TestInterruptedImportBlocksUploads(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	if _, err := r.store.Save(ctx, r.ref, []byte(exportV1)); err != nil {
		t.Fatal(err)
	}
	b := &memBackend{stacks: map[string][]byte{}, failImport: true}
	if _, err := r.store.RestoreMissing(ctx, b); err == nil {
		t.Fatal("RestoreMissing with a failing import succeeded")
	}
	if _, err := r.store.Save(ctx, r.ref, []byte(exportV1)); !errors.Is(err, checkpoint.ErrImportPending) {
		t.Fatalf("Save during a pending import = %v, want ErrImportPending", err)
	}
	if cp, _ := storage.LatestStackStates(ctx, r.db.Read); len(cp) != 1 || cp[0].Version != 1 {
		t.Fatalf("a refused upload stored a version: %+v", cp)
	}

	// The import "happened" but stored something else: verification fails
	// and the marker stays, even though the stack now exists.
	b.failImport, b.mangle = false, true
	if _, err := r.store.RestoreMissing(ctx, b); !errors.Is(err, checkpoint.ErrVerify) {
		t.Fatalf("RestoreMissing with a mangled import = %v, want ErrVerify", err)
	}
	if _, err := r.store.Save(ctx, r.ref, []byte(exportV1)); !errors.Is(err, checkpoint.ErrImportPending) {
		t.Fatalf("Save after a failed verification = %v, want ErrImportPending", err)
	}

	// The marker makes the next start import the stack again although it
	// exists now; verified, uploads resume.
	b.mangle = false
	res, err := r.store.RestoreMissing(ctx, b)
	if err != nil || len(res.Imported) != 1 {
		t.Fatalf("RestoreMissing = %+v, %v; want the pending import finished", res, err)
	}
	if _, err := storage.StackImportMarker(ctx, r.db.Read, r.ref.Stack); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("marker after a verified import: %v, want none", err)
	}
	if v, err := r.store.Save(ctx, r.ref, []byte(exportV1)); err != nil || v != 2 {
		t.Fatalf("Save after the import = %d, %v; want version 2", v, err)
	}
}

// TestWipedStackStaysMissing: after MarkWiped a stack missing from the
// backend is not restored (a wipe is not undone by a restart), a pending
// import marker is cleared with it, a stack without checkpoints gets no
// row, a second mark adds none, and the stack's next real checkpoint is
// restored again (docs/operations.md, "Checkpoints").
func TestWipedStackStaysMissing(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	if _, err := r.store.Save(ctx, r.ref, []byte(exportV1)); err != nil {
		t.Fatal(err)
	}
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.PutStackImportMarker(ctx, tx, r.ref.Stack, 1, time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	marked, err := r.store.MarkWiped(ctx, r.ref.Stack, "box-1-data")
	if err != nil || len(marked) != 1 || marked[0] != r.ref.Stack {
		t.Fatalf("MarkWiped = %v, %v; want the compute stack only (the data stack has no checkpoint)", marked, err)
	}
	if again, err := r.store.MarkWiped(ctx, r.ref.Stack); err != nil || len(again) != 0 {
		t.Fatalf("a second MarkWiped = %v, %v; want nothing new", again, err)
	}
	if _, err := storage.StackImportMarker(ctx, r.db.Read, r.ref.Stack); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the import marker survived the wipe: %v", err)
	}
	cps, err := storage.StackCheckpoints(ctx, r.db.Read, []string{r.ref.Stack, "box-1-data"}, 5)
	if err != nil || len(cps) != 2 || cps[0].Version != 2 || !cps[0].Wiped || cps[1].Wiped {
		t.Fatalf("checkpoints after the wipe = %+v, %v; want v2 wiped over v1", cps, err)
	}

	empty := &memBackend{stacks: map[string][]byte{}}
	res, err := r.store.RestoreMissing(ctx, empty)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Imported) != 0 || len(empty.stacks) != 0 || len(res.Wiped) != 1 {
		t.Fatalf("restore after the wipe: %+v, backend %v; want the stack left missing", res, empty.stacks)
	}

	if v, err := r.store.Save(ctx, r.ref, []byte(exportV1)); err != nil || v != 3 {
		t.Fatalf("the checkpoint after the next up = %d, %v", v, err)
	}
	res, err = r.store.RestoreMissing(ctx, empty)
	if err != nil || len(res.Imported) != 1 || string(empty.stacks[r.ref.Stack]) != exportV1 {
		t.Fatalf("restore after a new checkpoint: %+v, %v", res, err)
	}
}
