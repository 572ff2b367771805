package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
)

// ExitInterrupted is the exit status of a finite command ended by Ctrl-C
// (SIGINT): 128 plus the signal's number, as a shell reports a command a
// signal killed, so a script can tell "interrupted" from "failed" and
// stop. SIGTERM gives 143 by the same rule. A long-running command
// (`serve`, `agent run`, `mcp`) stopped by a signal stops cleanly and
// exits 0 (docs/operations.md, "Exit codes").
const ExitInterrupted = 128 + int(syscall.SIGINT)

// errInterrupted is the (silent) result of a command ended by a signal.
func errInterrupted(code int) error { return &exitError{code: code} }

// signalExit is the exit status for sig: 128 plus its number.
func signalExit(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return ExitInterrupted
}

// interruptible is a context that SIGINT or SIGTERM cancels, for the
// finite commands that wait (`jobs --watch`, `converge --wait`,
// `reroll`). code is 0 until a signal came, then the status to exit with;
// stop releases the signals.
type interruptible struct {
	ctx  context.Context
	code atomic.Int32
	stop func()
}

// onInterrupt starts watching SIGINT and SIGTERM.
func onInterrupt() *interruptible {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	in := &interruptible{ctx: ctx}
	go func() {
		select {
		case sig := <-sigs:
			in.code.Store(int32(signalExit(sig)))
			cancel()
		case <-ctx.Done():
		}
	}()
	in.stop = func() { signal.Stop(sigs); cancel() }
	return in
}

// err is the interruption's exit error when a signal ended the wait,
// else other unchanged.
func (in *interruptible) err(other error) error {
	if c := in.code.Load(); c != 0 {
		return errInterrupted(int(c))
	}
	return other
}

// readLine reads one line from r (without its line ending) unless a
// signal arrives on sigs first, which is errInterrupted with that signal's
// status. An empty r (EOF before any byte) is io.EOF. Used for prompts on
// a terminal, whose read cannot be cancelled: the reading goroutine is
// left to the process's exit.
func readLine(r io.Reader, limit int64, sigs <-chan os.Signal) (string, error) {
	type result struct {
		line string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(io.LimitReader(r, limit)).ReadString('\n')
		if errors.Is(err, io.EOF) && line != "" {
			err = nil
		}
		done <- result{strings.TrimRight(line, "\r\n"), err}
	}()
	select {
	case res := <-done:
		return res.line, res.err
	case sig := <-sigs:
		return "", errInterrupted(signalExit(sig))
	}
}

// PromptLine reads one line of an interactive prompt from r (at most
// limit bytes): the server commands' prompts use it as cli's own do.
// Ctrl-C or SIGTERM while it waits ends it with an error that exits 130
// (143) (docs/operations.md, "Exit codes"); at the end of r it returns
// what it read and io.EOF.
func PromptLine(r io.Reader, limit int64) (string, error) { return promptLine(r, limit) }

// IsInterrupted reports whether err is PromptLine's interruption (a
// signal while the prompt waited): the command returns it as it is.
func IsInterrupted(err error) bool {
	var ee *exitError
	return errors.As(err, &ee) && ee.code > 128
}

// promptLine reads one line of a terminal prompt; Ctrl-C ends it with
// ExitInterrupted (after the caller's deferred terminal restore runs).
func promptLine(r io.Reader, limit int64) (string, error) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return readLine(r, limit, sigs)
}
