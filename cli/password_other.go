//go:build !linux

package cli

import "errors"

// readHidden is not implemented off Linux: there, pipe the password on
// standard input or use --password-file.
func readHidden(string) (string, error) {
	return "", errors.New("reading from a terminal is supported on Linux only; pipe the password on standard input or use --password-file")
}
