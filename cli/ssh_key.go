package cli

import (
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/chalupa-run/chalupa/adminapi"
)

// adminSSHKeyCmd prints the public key of converge's SSH identity
// (docs/operations.md, "SSH key delivery").
type adminSSHKeyCmd struct {
	JSON        bool `help:"Print JSON (the key and its SHA256 fingerprint)."`
	Fingerprint bool `help:"Print the key's MD5 fingerprint (aa:bb:…), the form 'admin box create --ssh-key' takes and DigitalOcean lists, once the key is imported."`
}

func (*adminSSHKeyCmd) operation() string { return adminapi.OpGetSSHKey }

// Run prints the public key as one authorized_keys line, ready for
// `doctl compute ssh-key import chalupa --public-key-file FILE`, or its
// MD5 fingerprint.
func (c *adminSSHKeyCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).GetSSHKey, func(w io.Writer, k adminapi.SSHKey) error {
		line := k.PublicKey
		if c.Fingerprint {
			fp, err := md5Fingerprint(k.PublicKey)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			line = fp
		}
		_, err := fmt.Fprintln(w, line)
		return err
	})
}

// md5Fingerprint is the colon-separated hex MD5 of an authorized_keys
// line's key blob: the fingerprint DigitalOcean's API names SSH keys by.
func md5Fingerprint(authorizedKey string) (string, error) {
	f := strings.Fields(authorizedKey)
	if len(f) < 2 {
		return "", errors.New("the daemon's public key is not an authorized_keys line")
	}
	blob, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil {
		return "", errors.New("the daemon's public key is not an authorized_keys line")
	}
	sum := md5.Sum(blob)
	hexes := make([]string, len(sum))
	for i, b := range sum {
		hexes[i] = fmt.Sprintf("%02x", b)
	}
	return strings.Join(hexes, ":"), nil
}
