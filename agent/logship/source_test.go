package logship_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/chalupa-run/chalupa/agent/logship"
)

// readAll reads a source until it has nothing new, returning the bytes
// and the last cursor.
func readAll(t *testing.T, s logship.Source) ([]byte, string) {
	t.Helper()
	var out []byte
	cursor := ""
	for range 100 {
		b, c, err := s.Read(1 << 10)
		if err != nil {
			t.Fatal(err)
		}
		cursor = c
		if len(b) == 0 {
			return out, cursor
		}
		out = append(out, b...)
	}
	t.Fatal("source never ran dry")
	return nil, ""
}

func write(t *testing.T, path string, flag int, data string) {
	t.Helper()
	f, err := os.OpenFile(path, flag|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

func TestFileSource(t *testing.T) {
	t.Run("whole lines only, then the rest once terminated", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "a.log")
		write(t, p, os.O_APPEND, "one\ntw")
		s := logship.OpenFileSource(p, "")
		if got, _ := readAll(t, s); string(got) != "one\n" {
			t.Fatalf("got %q", got)
		}
		write(t, p, os.O_APPEND, "o\n")
		if got, _ := readAll(t, s); string(got) != "two\n" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("a restart resumes at the cursor", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "a.log")
		write(t, p, os.O_APPEND, "one\n")
		s := logship.OpenFileSource(p, "")
		_, cur := readAll(t, s)
		s.Close()
		write(t, p, os.O_APPEND, "two\n")
		if got, _ := readAll(t, logship.OpenFileSource(p, cur)); string(got) != "two\n" {
			t.Fatalf("after restart: %q", got)
		}
	})
	t.Run("rotation by rename drains the old file, then reads the new", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "a.log")
		write(t, p, os.O_APPEND, "one\n")
		s := logship.OpenFileSource(p, "")
		readAll(t, s)
		write(t, p, os.O_APPEND, "two\nunterminated")
		os.Rename(p, p+".1")
		write(t, p, os.O_APPEND, "three\n")
		if got, _ := readAll(t, s); string(got) != "two\nunterminatedthree\n" {
			t.Fatalf("across the rotation: %q", got)
		}
	})
	t.Run("copytruncate starts again from 0", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "a.log")
		write(t, p, os.O_APPEND, "a long first line\n")
		s := logship.OpenFileSource(p, "")
		readAll(t, s)
		write(t, p, os.O_TRUNC, "new\n")
		if got, _ := readAll(t, s); string(got) != "new\n" {
			t.Fatalf("after truncation: %q", got)
		}
	})
	t.Run("a line past MaxLineBytes is cut", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "a.log")
		long := bytes.Repeat([]byte("x"), logship.MaxLineBytes+10)
		write(t, p, os.O_APPEND, string(long))
		got, _ := readAll(t, logship.OpenFileSource(p, ""))
		if len(got) < logship.MaxLineBytes {
			t.Fatalf("an unterminated %d-byte line: %d bytes read", len(long), len(got))
		}
	})
	t.Run("a missing file is waited for", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "later.log")
		s := logship.OpenFileSource(p, "")
		if got, _ := readAll(t, s); len(got) != 0 {
			t.Fatalf("got %q", got)
		}
		write(t, p, os.O_APPEND, "here\n")
		if got, _ := readAll(t, s); string(got) != "here\n" {
			t.Fatalf("got %q", got)
		}
	})
}

// TestSplitJournal: journalctl's output with --show-cursor is split into
// the entries and the cursor after them; no entries keep the old cursor.
func TestSplitJournal(t *testing.T) {
	for _, tc := range []struct {
		name, out, prev, body, next string
	}{
		{"entries", "2026-12-01T10:00:00+0000 host app[1]: up\n-- cursor: s=abc;i=2\n", "s=old", "2026-12-01T10:00:00+0000 host app[1]: up\n", "s=abc;i=2"},
		{"no entries", "-- No entries --\n", "s=old", "", "s=old"},
		{"nothing", "", "", "", ""},
		{"a line mentioning a cursor", "x -- cursor: not one\n-- cursor: s=real\n", "", "x -- cursor: not one\n", "s=real"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, next := logship.SplitJournal([]byte(tc.out), tc.prev)
			if string(body) != tc.body || next != tc.next {
				t.Fatalf("got %q, %q; want %q, %q", body, next, tc.body, tc.next)
			}
		})
	}
}
