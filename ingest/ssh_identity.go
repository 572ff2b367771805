package ingest

import "strconv"

// SSHIdentityAAD is the additional data binding the SSH identity's envelope
// to its row (docs/operations.md, "Master key and envelopes"): the
// converge key delivery seals and opens it, Rewrap re-seals it.
func SSHIdentityAAD(id int64) []byte {
	return []byte("chalupa/ssh-identity/" + strconv.FormatInt(id, 10))
}
