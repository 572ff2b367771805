package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/testwait"
)

func TestWALStatsAndShrinks(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	samples := []walSample{
		{at(0), 0}, {at(1), 4 << 20}, {at(2), 40 << 20}, {at(3), 40 << 20}, // storm
		{at(4), 0}, {at(5), 0}, {at(6), 8 << 20}, {at(7), 2 << 20}, // quiet: truncated twice
	}
	for _, tc := range []struct {
		name                  string
		from, to              float64
		first, last, max, min int64
		n                     int
	}{
		{"storm", 0, 4, 0, 40 << 20, 40 << 20, 0, 4},
		{"quiet", 4, 8, 0, 2 << 20, 8 << 20, 0, 4},
		{"one sample", 2, 2.5, 40 << 20, 40 << 20, 40 << 20, 40 << 20, 1},
		{"nothing", 10, 20, 0, 0, 0, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := statsBetween(samples, at(tc.from), at(tc.to))
			if st.first != tc.first || st.last != tc.last || st.max != tc.max || st.min != tc.min || st.n != tc.n {
				t.Errorf("got %+v", st)
			}
		})
	}
	sh := shrinks(samples)
	if len(sh) != 2 || sh[0].from != 40<<20 || sh[0].to != 0 || !sh[0].at.Equal(at(4)) || sh[1].from != 8<<20 || sh[1].to != 2<<20 {
		t.Errorf("shrinks = %+v", sh)
	}
	if got := shrinks(samples[:4]); len(got) != 0 {
		t.Errorf("a growing WAL shrank: %+v", got)
	}
}

func TestWatchWALSamplesARealFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db-wal")
	ctx, cancel := context.WithCancel(context.Background())
	w := watchWAL(ctx, path, 10*time.Millisecond)
	// sampled waits until the watch has taken n samples of size.
	sampled := func(what string, size int64, n int) {
		testwait.Eventually(t, testwait.Short, what, func() (bool, string) {
			got := 0
			for _, s := range w.samples() {
				if s.size == size {
					got++
				}
			}
			return got >= n, fmt.Sprintf("%d samples of %d bytes", got, size)
		})
	}
	sampled("samples of the missing file", 0, 3)
	if err := os.WriteFile(path, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	sampled("samples of the written file", 8192, 2)
	cancel()
	<-w.done
	s := w.samples()
	if len(s) < 5 || s[0].size != 0 || s[len(s)-1].size != 8192 {
		t.Errorf("samples %+v: want 0 (no file) first and 8192 last", s)
	}
}

func TestPrintTimelineFoldsFlatStretches(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var s []walSample
	for i := range 40 { // 0..3.9 s every 100 ms
		size := int64(0)
		if i >= 10 {
			size = 64 << 20 // from 1 s on, through the quiet
		}
		s = append(s, walSample{t0.Add(time.Duration(i) * 100 * time.Millisecond), size})
	}
	var b strings.Builder
	printTimeline(&b, s, t0, 500*time.Millisecond, func(at time.Time) string {
		if at.Before(t0.Add(3 * time.Second)) {
			return "storm"
		}
		return "quiet"
	})
	// 0.5 s repeats 0 s; 1.5–2.5 s repeat 1 s; 3.5 s, the last bucket,
	// repeats 3 s but is written all the same.
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	got := []string{}
	for _, l := range lines[1:] {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	wantRows := []string{"0.0s storm 0 bytes", "1.0s storm 64.00 MiB", "3.0s quiet 64.00 MiB", "3.5s quiet 64.00 MiB"}
	if strings.Join(got, "|") != strings.Join(wantRows, "|") {
		t.Errorf("timeline rows:\n%s\nwant %q", b.String(), wantRows)
	}
}

func TestTruncatedVerdict(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		sh      []shrink
		largest int64
		final   int64
		want    string
	}{
		{"never", nil, 300 << 20, 300 << 20, "truncated back: no, the file keeps its 300.00 MiB"},
		{"to zero", []shrink{{t0.Add(121700 * time.Millisecond), 100 << 20, 0}}, 100 << 20, 0,
			"truncated back: yes, from 100.00 MiB to 0 bytes at 121.7s (largest 100.00 MiB; 0 bytes at the end)"},
		{"to a header, then grew", []shrink{{t0.Add(time.Second), 50 << 20, 32}, {t0.Add(3 * time.Second), 60 << 20, 32}}, 60 << 20, 4 << 20,
			"truncated back: yes, from 60.00 MiB to 32 bytes at 3.0s (largest 60.00 MiB; 4.00 MiB at the end)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := truncatedVerdict(tc.sh, tc.largest, tc.final, t0); !strings.HasPrefix(got, tc.want) {
				t.Errorf("got  %q\nwant %q…", got, tc.want)
			}
		})
	}
}

func TestSizeFormats(t *testing.T) {
	for _, tc := range []struct {
		b          int64
		plain, sig string
	}{
		{0, "0 bytes", "0 bytes"},
		{4152, "4152 bytes", "+4152 bytes"},
		{-4152, "-4152 bytes", "-4152 bytes"},
		{10 << 10, "0.01 MiB", "+0.01 MiB"},
		{300 << 20, "300.00 MiB", "+300.00 MiB"},
		{-624027560, "-624027560 bytes", "-595.12 MiB"},
	} {
		t.Run(tc.sig, func(t *testing.T) {
			if tc.b >= 0 {
				if got := mib(tc.b); got != tc.plain {
					t.Errorf("mib(%d) = %q, want %q", tc.b, got, tc.plain)
				}
			}
			if got := signedMiB(tc.b); got != tc.sig {
				t.Errorf("signedMiB(%d) = %q, want %q", tc.b, got, tc.sig)
			}
		})
	}
}
