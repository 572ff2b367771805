package adminapi

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The console password's rules (docs/operations.md, "Console"), here with
// the contract of adminSetConsolePassword so that the CLI refuses a bad
// password before sending it and the console refuses the same ones.

// MinPasswordRunes is the shortest password accepted, in characters: with
// ten failures per ten minutes per source, twelve characters are far out of
// reach of online guessing.
const MinPasswordRunes = 12

// MaxPasswordBytes bounds a password, in bytes, so a login body cannot make
// the hash work on megabytes.
const MaxPasswordBytes = 1024

// Password errors.
var (
	// ErrPasswordTooShort: fewer than MinPasswordRunes characters.
	ErrPasswordTooShort = fmt.Errorf("the password must have at least %d characters", MinPasswordRunes)
	// ErrPasswordTooLong: more than MaxPasswordBytes bytes.
	ErrPasswordTooLong = fmt.Errorf("the password must have at most %d bytes", MaxPasswordBytes)
	// ErrPasswordInvalid: not UTF-8, or holds a control character.
	ErrPasswordInvalid = errors.New("the password must be UTF-8 without control characters")
)

// CheckPassword reports whether pw is acceptable as the operator password.
// Errors: ErrPasswordTooShort, ErrPasswordTooLong, ErrPasswordInvalid.
func CheckPassword(pw string) error {
	switch {
	case len(pw) > MaxPasswordBytes:
		return ErrPasswordTooLong
	case !utf8.ValidString(pw) || strings.ContainsFunc(pw, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return ErrPasswordInvalid
	case utf8.RuneCountInString(pw) < MinPasswordRunes:
		return ErrPasswordTooShort
	}
	return nil
}
