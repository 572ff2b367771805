package cli

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/chalupa-run/chalupa/adminapi"
)

// readHidden prints prompt on stderr and reads one line from the terminal
// on standard input with echo turned off (restored afterwards).
func readHidden(prompt string) (string, error) {
	fd := int(os.Stdin.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return "", errors.New("the terminal cannot be configured; use --password-file")
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ICANON | unix.ISIG
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return "", errors.New("the terminal cannot be configured; use --password-file")
	}
	defer func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }()
	fmt.Fprint(os.Stderr, prompt)
	// Ctrl-C returns here (exit 130), so the deferred restore turns echo
	// back on (docs/operations.md, "Exit codes").
	line, err := promptLine(os.Stdin, adminapi.MaxPasswordBytes+2)
	fmt.Fprintln(os.Stderr)
	var ee *exitError
	if err != nil && !errors.As(err, &ee) {
		return "", errors.New("the password cannot be read")
	}
	return line, err
}
