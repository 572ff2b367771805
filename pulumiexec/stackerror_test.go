package pulumiexec_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/chalupa-run/chalupa/pulumiexec"
)

// TestStackErrorKind: each way a stack read fails has the job doctor's
// error kind (docs/operations.md, "Job doctor"): the pulumi CLI's words
// for a corrupt state and an unopenable backend, a file-system error, a
// lock file that is not Pulumi's, and anything else.
func TestStackErrorKind(t *testing.T) {
	lockDir := t.TempDir()
	locks := filepath.Join(lockDir, ".pulumi", "locks", "organization", pulumiexec.Project, "box-1-data")
	if err := os.MkdirAll(locks, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(locks, "0b8e5f1c.json"), []byte("not a lock"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, lockErr := (&pulumiexec.Engine{BackendURL: "file://" + lockDir}).StackLocks("box-1-data")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"read", nil, ""},
		{"corrupt state file", errors.New("exit status 1\nstderr: error: failed to load checkpoint: place 1: invalid character 'g' looking for beginning of value"), pulumiexec.StackStateCorrupt},
		{"corrupt meta.yaml", errors.New(`error: corrupt store: unmarshal ".pulumi/meta.yaml": yaml: line 1`), pulumiexec.StackStateCorrupt},
		{"lock file not Pulumi's", lockErr, pulumiexec.StackStateCorrupt},
		{"export not a deployment", fmt.Errorf("%w: stack box-1-data: unexpected end of JSON input", pulumiexec.ErrStateCorrupt), pulumiexec.StackStateCorrupt},
		{"backend not a directory", errors.New(`error: unable to open state directory "file:///var/lib/chalupa/pulumi": /var/lib/chalupa/pulumi is not a directory`), pulumiexec.StackBackendUnreadable},
		{"workspace not creatable", &fs.PathError{Op: "mkdir", Path: "/var/lib/chalupa/pulumi", Err: errors.New("read-only file system")}, pulumiexec.StackBackendUnreadable},
		{"permission denied", errors.New("stderr: error: open /var/lib/chalupa/pulumi/.pulumi/meta.yaml: permission denied"), pulumiexec.StackBackendUnreadable},
		{"cli missing", errors.New(`exec: "pulumi": executable file not found in $PATH`), pulumiexec.StackReadFailed},
		{"cancelled", context.Canceled, pulumiexec.StackReadFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "lock file not Pulumi's" && tc.err == nil {
				t.Fatal("StackLocks read a lock file that is not Pulumi's without an error")
			}
			if got := pulumiexec.StackErrorKind(tc.err); got != tc.want {
				t.Fatalf("StackErrorKind(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}
