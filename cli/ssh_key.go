package cli

import (
	"fmt"
	"io"

	"github.com/chalupa-run/chalupa/adminapi"
)

// adminSSHKeyCmd prints the public key of converge's SSH identity
// (docs/operations.md, "SSH key delivery").
type adminSSHKeyCmd struct {
	JSON bool `help:"Print JSON (the key and its SHA256 fingerprint)."`
}

func (*adminSSHKeyCmd) operation() string { return adminapi.OpGetSSHKey }

// Run prints the public key as one authorized_keys line, ready for
// `doctl compute ssh-key import chalupa --public-key-file FILE`.
func (c *adminSSHKeyCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).GetSSHKey, func(w io.Writer, k adminapi.SSHKey) error {
		_, err := fmt.Fprintln(w, k.PublicKey)
		return err
	})
}
