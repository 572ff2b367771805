package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/chalupa-run/chalupa/adminapi"
)

// adminPasswordCmd sets the console password through the admin API
// (docs/operations.md, "Console"). The password is read from the terminal
// twice with echo off, else one line of standard input, else
// --password-file: never a flag value or an environment variable, which
// shell history and process listings keep.
type adminPasswordCmd struct {
	PasswordFile string `name:"password-file" type:"path" help:"Read the password from the first line of this file (mode 600) instead of standard input."`
	JSON         bool   `help:"Print JSON."`
}

func (*adminPasswordCmd) operation() string { return adminapi.OpSetConsolePassword }

// errPasswordsDiffer: the two terminal entries did not match.
var errPasswordsDiffer = errors.New("the two passwords differ; nothing was changed")

// Run reads the new password and sets it.
func (c *adminPasswordCmd) Run(a *adminCmd) error {
	pw, err := c.read(a.env)
	var ee *exitError
	if errors.As(err, &ee) {
		return err // Ctrl-C at the prompt: 130
	}
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	if err := adminapi.CheckPassword(pw); err != nil {
		return &exitError{code: 1, err: err}
	}
	set := func(cl *adminapi.Client, ctx context.Context) (adminapi.ConsolePasswordSet, error) {
		return cl.SetConsolePassword(ctx, adminapi.SetConsolePasswordRequest{Password: pw})
	}
	return runOp(a, c.JSON, set, func(w io.Writer, r adminapi.ConsolePasswordSet) error {
		_, err := fmt.Fprintf(w, "console password set at %s; %d console session(s) signed out\n", r.SetAt.Format("2006-01-02T15:04:05Z"), r.SessionsEnded)
		return err
	})
}

// read returns the password from --password-file, the terminal or
// standard input.
func (c *adminPasswordCmd) read(env *Env) (string, error) {
	if c.PasswordFile != "" {
		return ReadPasswordFile(c.PasswordFile)
	}
	if isTerminal(env.Stdin) {
		first, err := readHidden("New console password: ")
		if err != nil {
			return "", err
		}
		second, err := readHidden("Again: ")
		if err != nil {
			return "", err
		}
		if first != second {
			return "", errPasswordsDiffer
		}
		return first, nil
	}
	pw, err := firstLine(env.Stdin)
	if err == nil && pw == "" {
		return "", errEmptyStdin
	}
	return pw, err
}

// errEmptyStdin: standard input is not a terminal and gave no line.
var errEmptyStdin = errors.New("standard input is empty: type the password on a terminal, pipe one line into this command, or use --password-file FILE (mode 600)")

// ReadPasswordFile returns the first line of a --password-file (`admin
// password`'s, `smoke`'s), refusing a file group or others can read. The
// errors name the flag and the path, never the content.
func ReadPasswordFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("--password-file %s cannot be read (%s): write the password on its first line, mode 600", path, fileErrKind(err))
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("--password-file is readable by group or others (chmod 600 %s)", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--password-file %s cannot be read (%s)", path, fileErrKind(err))
	}
	defer f.Close()
	return firstLine(f)
}

// firstLine returns r's first line without its line ending.
func firstLine(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, adminapi.MaxPasswordBytes+2)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", errors.New("the password cannot be read")
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// fileErrKind names why a file cannot be read, in words, without the
// path the error already repeats.
func fileErrKind(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "no such file"
	case errors.Is(err, os.ErrPermission):
		return "permission denied"
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
