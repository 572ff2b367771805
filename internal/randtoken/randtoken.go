// Package randtoken makes the random strings chalupa generates: bearer
// tokens, and the random parts of test credentials.
package randtoken

import (
	"crypto/rand"
	"encoding/base64"
)

// New returns n random bytes from crypto/rand, base64url without padding
// (so 32 bytes give 43 characters carrying 256 bits).
func New(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}
