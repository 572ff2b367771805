package logship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"
)

// JournalTimeout bounds one journalctl run.
const JournalTimeout = 30 * time.Second

// ErrNoJournalctl: --log-unit needs journalctl on PATH.
var ErrNoJournalctl = errors.New("journalctl not found on PATH: --log-unit needs systemd's journal")

// JournalSource reads one systemd unit's journal through `journalctl -u
// UNIT -o short-iso --show-cursor`, after the saved cursor (all the
// unit's entries the journal keeps when there is none). Each run's output is handed out in
// blocks; only its last block carries the new cursor, so a crash in the
// middle re-reads (never skips) lines.
type JournalSource struct {
	bin, unit, cursor string
	buf               []byte
	next              string // the cursor after buf
}

// OpenJournalSource returns a source for unit resuming after cursor.
// Errors: ErrNoJournalctl.
func OpenJournalSource(unit, cursor string) (*JournalSource, error) {
	bin, err := exec.LookPath("journalctl")
	if err != nil {
		return nil, ErrNoJournalctl
	}
	return &JournalSource{bin: bin, unit: unit, cursor: cursor}, nil
}

var cursorPrefix = []byte("-- cursor: ")

// Read implements Source. Errors: journalctl failed.
func (s *JournalSource) Read(max int) ([]byte, string, error) {
	if len(s.buf) == 0 {
		args := []string{"-u", s.unit, "-o", "short-iso", "--no-pager", "--show-cursor", "-q"}
		if s.cursor != "" {
			args = append(args, "--after-cursor", s.cursor)
		}
		ctx, cancel := context.WithTimeout(context.Background(), JournalTimeout)
		out, err := exec.CommandContext(ctx, s.bin, args...).Output()
		cancel()
		if err != nil {
			return nil, s.cursor, fmt.Errorf("journalctl -u %s: %w", s.unit, err)
		}
		body, next := SplitJournal(out, s.cursor)
		s.buf, s.next = body, next
		if len(body) == 0 {
			s.cursor = next
			return nil, s.cursor, nil
		}
	}
	n := min(max, len(s.buf))
	if i := bytes.LastIndexByte(s.buf[:n], '\n'); i >= 0 && n < len(s.buf) {
		n = i + 1
	}
	b := s.buf[:n]
	s.buf = s.buf[n:]
	if len(s.buf) == 0 {
		s.cursor = s.next
	}
	return b, s.cursor, nil
}

// Close does nothing: no process outlives a Read.
func (s *JournalSource) Close() error { return nil }

// SplitJournal splits journalctl's output (`--show-cursor`) into the entries
// and the cursor after them (prev when the output names none, as when there
// are no entries).
func SplitJournal(out []byte, prev string) ([]byte, string) {
	body, next := out, prev
	if i := bytes.LastIndex(out, cursorPrefix); i >= 0 && (i == 0 || out[i-1] == '\n') {
		body, next = out[:i], string(bytes.TrimSpace(out[i+len(cursorPrefix):]))
	}
	if bytes.HasPrefix(body, []byte("-- No entries --")) {
		body = nil
	}
	return body, next
}
