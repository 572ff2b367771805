package adminapi

import (
	"context"
	"net/http"
)

// OpGetSSHKey returns the public key of chalupa's SSH identity.
const OpGetSSHKey = "adminGetSSHKey"

var sshOperations = []Operation{
	{ID: OpGetSSHKey, MCP: MCPPolicy{Access: MCPRead, Aliases: []string{"chalupa_admin_get_s_s_h_key"}}, Method: methodGet, Path: "/api/admin/ssh-key", Status: http.StatusOK,
		Response: typeOf[SSHKey](),
		Summary:  "the public key converge's key delivery logs in with (generated once); add it to the boxes' SSH keys"},
}

// SSHKey is the answer of adminGetSSHKey (docs/operations.md, "SSH key
// delivery"): the public half only; the private key never leaves the
// database's envelope.
type SSHKey struct {
	// PublicKey is the key in authorized_keys form (one line, no newline).
	PublicKey string `json:"publicKey"`
	// Fingerprint is its SHA256 fingerprint, as DigitalOcean's SSH key list
	// and ssh-keygen -l show it.
	Fingerprint string `json:"fingerprint"`
}

// GetSSHKey calls adminGetSSHKey.
func (c *Client) GetSSHKey(ctx context.Context) (SSHKey, error) {
	return call[SSHKey](ctx, c, OpGetSSHKey, nil)
}
