package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"
)

// walSample is the WAL file's size at one moment (0 when it does not exist).
type walSample struct {
	at   time.Time
	size int64
}

// walWatch samples the size of a -wal file at a fixed interval, from the
// outside (stat only: it opens nothing SQLite would notice), keeping at most
// maxSamples.
type walWatch struct {
	path  string
	every time.Duration
	mu    sync.Mutex
	s     []walSample
	done  chan struct{}
}

// maxSamples bounds a watch's memory: an hour at 100 ms.
const maxSamples = 36_000

// watchWAL starts sampling path every interval until ctx ends or stop is
// called.
func watchWAL(ctx context.Context, path string, every time.Duration) *walWatch {
	w := &walWatch{path: path, every: every, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			w.sample()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *walWatch) sample() {
	var size int64
	fi, err := os.Stat(w.path)
	if err == nil {
		size = fi.Size()
	} else if !errors.Is(err, fs.ErrNotExist) {
		size = -1
	}
	w.mu.Lock()
	if len(w.s) < maxSamples {
		w.s = append(w.s, walSample{time.Now(), size})
	}
	w.mu.Unlock()
}

// samples returns a copy of the samples so far.
func (w *walWatch) samples() []walSample {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]walSample(nil), w.s...)
}

// walStats summarizes the samples of one span of time.
type walStats struct {
	first, last, max, min int64
	maxAt                 time.Time
	n                     int
}

// statsBetween summarizes the samples taken in [from, to).
func statsBetween(s []walSample, from, to time.Time) walStats {
	st := walStats{min: -1}
	for _, x := range s {
		if x.at.Before(from) || !x.at.Before(to) {
			continue
		}
		if st.n == 0 {
			st.first = x.size
		}
		st.n++
		st.last = x.size
		if x.size > st.max {
			st.max, st.maxAt = x.size, x.at
		}
		if st.min < 0 || x.size < st.min {
			st.min = x.size
		}
	}
	return st
}

// shrink is a moment the WAL file got smaller: truncated by a checkpoint
// (TRUNCATE mode, or journal_size_limit), or deleted.
type shrink struct {
	at       time.Time
	from, to int64
}

// shrinks lists every drop in size between consecutive samples.
func shrinks(s []walSample) []shrink {
	var out []shrink
	for i := 1; i < len(s); i++ {
		if s[i].size >= 0 && s[i-1].size >= 0 && s[i].size < s[i-1].size {
			out = append(out, shrink{s[i].at, s[i-1].size, s[i].size})
		}
	}
	return out
}

// printTimeline writes the largest size seen in each bucket of width,
// from start, labelled with the span its middle falls in. A bucket the same
// as the one before (span and size) is left out, so a flat stretch takes one
// line; the last bucket is always written.
func printTimeline(out io.Writer, s []walSample, start time.Time, width time.Duration, label func(time.Time) string) {
	if len(s) == 0 {
		return
	}
	end := s[len(s)-1].at
	fmt.Fprintf(out, "%8s  %-12s  %14s\n", "t", "span", "WAL max")
	var prev, held string
	for b := start; !b.After(end); b = b.Add(width) {
		st := statsBetween(s, b, b.Add(width))
		if st.n == 0 {
			continue
		}
		l := label(b.Add(width / 2))
		if l == "" {
			l = label(b) // the last bucket may end after the last span
		}
		row := fmt.Sprintf("%7.1fs  %-12s  %14s\n", b.Sub(start).Seconds(), l, mib(st.max))
		if key := l + mib(st.max); key == prev {
			held = row
			continue
		} else {
			prev = key
		}
		fmt.Fprint(out, row)
		held = ""
	}
	if held != "" {
		fmt.Fprint(out, held)
	}
}

// printShrinks reports every time the WAL got smaller, or that it never did.
func printShrinks(out io.Writer, s []walSample, start time.Time) {
	sh := shrinks(s)
	if len(sh) == 0 {
		fmt.Fprintln(out, "the WAL file never got smaller (never truncated)")
		return
	}
	times := "times"
	if len(sh) == 1 {
		times = "time"
	}
	fmt.Fprintf(out, "the WAL file got smaller %d %s (truncated by a checkpoint):", len(sh), times)
	for i, x := range sh {
		if i == 8 {
			fmt.Fprintf(out, " … and %d more", len(sh)-i)
			break
		}
		fmt.Fprintf(out, " at %.1fs %s→%s;", x.at.Sub(start).Seconds(), mib(x.from), mib(x.to))
	}
	fmt.Fprintln(out)
}

// mib formats a file size: bytes below 10 KiB (a WAL truncated to its
// header is not "0.00 MiB"), else MiB with two decimals.
func mib(b int64) string {
	if b < 10<<10 {
		return fmt.Sprintf("%d bytes", b)
	}
	return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
}
