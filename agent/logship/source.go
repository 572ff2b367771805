package logship

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// MaxLineBytes bounds one line a file source waits for: a longer run of
// bytes without a newline is shipped as it is rather than held forever.
const MaxLineBytes = 64 << 10

// Source is where one service's lines come from. Read returns the next
// bytes (whole lines, unless a line passes MaxLineBytes), at most max, and
// the cursor just after them; nil bytes when there is nothing new. The
// cursor is what a restarted source resumes from.
type Source interface {
	Read(max int) ([]byte, string, error)
	Close() error
}

// FileSource tails one file from a cursor "INODE:OFFSET"
// (docs/operations.md, "Logs"). It survives rotation: when the path names
// another inode, or the same inode shrinks below the offset (copytruncate),
// it drains the file it holds to the end and starts the path's file from 0.
// A rotation while the agent is stopped loses the old file's unread tail.
type FileSource struct {
	path string
	f    *os.File
	ino  uint64
	off  int64
}

// OpenFileSource returns a source for path resuming at cursor ("" starts at
// the file's beginning). A missing file is no error: it is waited for.
func OpenFileSource(path, cursor string) *FileSource {
	s := &FileSource{path: path}
	if ino, off, ok := parseFileCursor(cursor); ok {
		s.ino, s.off = ino, off
	}
	return s
}

func parseFileCursor(c string) (uint64, int64, bool) {
	a, b, ok := strings.Cut(c, ":")
	if !ok {
		return 0, 0, false
	}
	ino, err1 := strconv.ParseUint(a, 10, 64)
	off, err2 := strconv.ParseInt(b, 10, 64)
	return ino, off, err1 == nil && err2 == nil && off >= 0
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// Cursor is the source's position, "INODE:OFFSET".
func (s *FileSource) Cursor() string { return fmt.Sprintf("%d:%d", s.ino, s.off) }

// open opens the path; the saved offset holds only for the same inode.
func (s *FileSource) open() error {
	f, err := os.Open(s.path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	if ino := inode(fi); ino != s.ino || fi.Size() < s.off {
		s.ino, s.off = ino, 0
	}
	s.f = f
	return nil
}

// Read implements Source. Errors: the file cannot be read (a missing file
// is nil bytes, no error).
func (s *FileSource) Read(max int) ([]byte, string, error) {
	if s.f == nil {
		if err := s.open(); errors.Is(err, os.ErrNotExist) {
			return nil, s.Cursor(), nil
		} else if err != nil {
			return nil, s.Cursor(), err
		}
	}
	buf := make([]byte, max)
	n, err := s.f.ReadAt(buf, s.off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, s.Cursor(), err
	}
	buf = buf[:n]
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		buf = buf[:i+1]
	} else if n < MaxLineBytes && n < max {
		buf = buf[:0]
	}
	if len(buf) > 0 {
		s.off += int64(len(buf))
		return buf, s.Cursor(), nil
	}
	// Nothing whole is left in the file held: has the path moved on?
	fi, err := os.Stat(s.path)
	if err != nil {
		return nil, s.Cursor(), nil // rotated away, the new file not there yet
	}
	held, _ := s.f.Stat()
	switch {
	case held != nil && inode(fi) != inode(held):
		// Rotated: ship the old file's unterminated tail, then move on.
		tail := make([]byte, MaxLineBytes)
		m, _ := s.f.ReadAt(tail, s.off)
		s.f.Close()
		s.f = nil
		s.ino, s.off = inode(fi), 0
		if m > 0 {
			return tail[:m], s.Cursor(), nil
		}
		return s.Read(max)
	case fi.Size() < s.off:
		// Truncated in place (copytruncate): start again.
		s.off = 0
		return s.Read(max)
	}
	return nil, s.Cursor(), nil
}

// Close closes the file held.
func (s *FileSource) Close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
