package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"

	"github.com/chalupa-run/chalupa/adminapi"
)

// argon2id parameters (docs/operations.md, "Console"): OWASP's minimum
// configuration (19 MiB, two passes, one lane). The daemon runs on a
// 1 GiB droplet and login attempts are served one at a time, so one hash
// in flight costs 19 MiB at most; the rate limit, not the hash cost, is
// what stops online guessing. Stored hashes carry their own parameters, so
// raising these later keeps old hashes verifiable.
const (
	argonTime      = 2
	argonMemoryKiB = 19 * 1024
	argonThreads   = 1
	argonKeyBytes  = 32
	argonSaltBytes = 16
)

// The password rules live with the admin API contract, so the CLI checks a
// password before sending it without importing the console.
const (
	// MinPasswordRunes is adminapi.MinPasswordRunes.
	MinPasswordRunes = adminapi.MinPasswordRunes
	// MaxPasswordBytes is adminapi.MaxPasswordBytes.
	MaxPasswordBytes = adminapi.MaxPasswordBytes
)

// Password errors: adminapi's.
var (
	// ErrPasswordTooShort is adminapi.ErrPasswordTooShort.
	ErrPasswordTooShort = adminapi.ErrPasswordTooShort
	// ErrPasswordTooLong is adminapi.ErrPasswordTooLong.
	ErrPasswordTooLong = adminapi.ErrPasswordTooLong
	// ErrPasswordInvalid is adminapi.ErrPasswordInvalid.
	ErrPasswordInvalid = adminapi.ErrPasswordInvalid
)

// CheckPassword is adminapi.CheckPassword: whether pw is acceptable as the
// operator password.
func CheckPassword(pw string) error { return adminapi.CheckPassword(pw) }

// HashPassword returns pw's argon2id hash in the PHC string format
// ($argon2id$v=19$m=…,t=…,p=…$salt$hash). Errors: those of CheckPassword.
func HashPassword(pw string) (string, error) {
	if err := CheckPassword(pw); err != nil {
		return "", err
	}
	salt := make([]byte, argonSaltBytes)
	_, _ = rand.Read(salt) // crypto/rand.Read never fails (Go 1.24+)
	key := argon2.IDKey([]byte(pw), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyBytes)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemoryKiB, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key)), nil
}

// dummyHash is verified against when no password is set, so a login takes
// as long whether or not one exists. It is hashed on the first such login,
// not when the package is initialised: an argon2id hash costs its 19 MiB
// and tens of milliseconds, which every command of the binary would pay
// (docs/operations.md, "Footprint").
var dummyHash = sync.OnceValue(func() string {
	h, _ := HashPassword("not-a-password-ever-set")
	return h
})

// VerifyPassword reports whether pw matches encoded (a HashPassword
// string), in constant time. A malformed hash matches nothing.
func VerifyPassword(encoded, pw string) bool {
	if len(pw) > MaxPasswordBytes {
		return false
	}
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var v int
	var m uint32
	var t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || t == 0 || p == 0 || m > 1<<21 || t > 16 {
		return false
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	want, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(want) == 0 || len(want) > 64 {
		return false
	}
	got := argon2.IDKey([]byte(pw), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}
