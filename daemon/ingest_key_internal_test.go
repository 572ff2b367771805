package daemon

import (
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
)

// TestRotateCallBoundCoversTheDaemon: the least bound a client gives one
// rotate or deliver-key call covers what the daemon may spend on a box —
// the SSH wait and one more attempt, the remote write and restart, the wait
// for the confirming heartbeat — before the detached rotations end, so the
// daemon's answer arrives before the client gives up (docs/operations.md,
// "Ingest keys").
func TestRotateCallBoundCoversTheDaemon(t *testing.T) {
	need := sshdeliver.UpgradeWait + sshdeliver.DefaultAttemptTimeout + sshdeliver.RotateTimeout + pulumiexec.DefaultConfirmWait
	if have := adminapi.RotateKeysCallBound - rotationMargin; have < need {
		t.Fatalf("the rotations may run %v before their context ends; they need %v", have, need)
	}
}
