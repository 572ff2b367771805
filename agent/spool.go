package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Spool bounds (docs/operations.md, "Agent").
const (
	// SpoolMaxRecords caps the records kept. Windows older than two hours
	// are dropped anyway (about 120 of them), so the cap only bites on
	// records that do not age out (lifecycle events, run reports) during a
	// very long outage; the oldest go first.
	SpoolMaxRecords = 2000
	// SpoolMaxBytes caps the spool's size on disk (bodies and headers):
	// small beside a droplet's disk, and 250 full-size (64 KiB) bodies.
	SpoolMaxBytes = 16 << 20
	// spoolFormat is the record header's version.
	spoolFormat = 1
	// recordSuffix names a complete record file; temporaries start with
	// tmpPrefix and are removed at open.
	recordSuffix = ".rec"
	tmpPrefix    = ".tmp-"
)

// Record is one spooled request: the route it is posted to, the exact body
// bytes (replayed byte-identical, with a fresh signature per attempt, so the
// control plane deduplicates a retry), and metadata. It is generic over
// routes: telemetry windows today, lifecycle events and run reports later.
type Record struct {
	// Seq orders records; replay goes in increasing Seq.
	Seq uint64 `json:"-"`
	// Route is the path posted to, e.g. TelemetryRoute.
	Route string `json:"route"`
	// Kind names the record in logs and status ("telemetry").
	Kind string `json:"kind"`
	// Created is when the record was spooled.
	Created time.Time `json:"created"`
	// DropAfter, when set, is when the record is too old to send (a
	// window's end + protocol.MaxWindowAge): it is dropped, counted, never sent.
	DropAfter time.Time `json:"dropAfter,omitzero"`
	// Body is the exact request body.
	Body []byte `json:"-"`
	// size is the file's size in bytes.
	size int64
}

// recordHeader is the first line of a record file.
type recordHeader struct {
	V int `json:"v"`
	Record
}

// DropReason says why a record left the spool without being delivered.
type DropReason string

// Drop reasons, counted in the state file and shown by `agent status`.
const (
	// DropOverCap: the oldest record, pushed out by the spool's caps.
	DropOverCap DropReason = "overCap"
	// DropTooOld: a window past the control plane's 2-hour age limit.
	DropTooOld DropReason = "tooOld"
	// DropConflict: 409 window_conflict, event_conflict or run_conflict —
	// the control plane holds a different body under this record's
	// identity; resending cannot help.
	DropConflict DropReason = "conflict"
	// DropDeploymentEnded: 409 deployment_ended.
	DropDeploymentEnded DropReason = "deploymentEnded"
	// DropRefused: any other refusal of the record itself (4xx).
	DropRefused DropReason = "refused"
	// DropCorrupt: a record file that cannot be read back.
	DropCorrupt DropReason = "corrupt"
)

// Spool is the durable queue of records: one file per record in Dir, named
// by its zero-padded sequence number, holding a JSON header line and then
// the body bytes. A record is written to a temporary file, fsync'ed, renamed
// into place and the directory fsync'ed before Append returns, so an
// appended record survives a crash or power loss; Remove is one unlink.
// One file per record (rather than an append log) needs no compaction, and
// a torn write can only leave a temporary file, removed at the next open; at
// one window a minute the file count stays small.
type Spool struct {
	dir        string
	maxRecords int
	maxBytes   int64
	onDrop     func(DropReason, Record)

	mu      sync.Mutex
	nextSeq uint64
	index   []Record // sorted by Seq; bodies not held
	bytes   int64
}

// OpenSpool opens (creating, mode 0700) the spool in dir with the given caps
// (0 takes SpoolMaxRecords / SpoolMaxBytes). onDrop, if set, hears every
// record dropped by the caps or found corrupt. Errors: the directory cannot
// be made or read.
func OpenSpool(dir string, maxRecords int, maxBytes int64, onDrop func(DropReason, Record)) (*Spool, error) {
	if maxRecords <= 0 {
		maxRecords = SpoolMaxRecords
	}
	if maxBytes <= 0 {
		maxBytes = SpoolMaxBytes
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s := &Spool{dir: dir, maxRecords: maxRecords, maxBytes: maxBytes, onDrop: onDrop, nextSeq: 1}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		seq, ok := parseRecordName(name)
		if !ok {
			continue
		}
		r, err := s.readHeader(seq)
		if err != nil {
			// Unreadable: it can never be sent, and kept it would count
			// against the caps forever.
			_ = os.Remove(filepath.Join(dir, name))
			s.drop(DropCorrupt, Record{Seq: seq})
			continue
		}
		s.index = append(s.index, r)
		s.bytes += r.size
		s.nextSeq = max(s.nextSeq, seq+1)
	}
	sort.Slice(s.index, func(i, j int) bool { return s.index[i].Seq < s.index[j].Seq })
	return s, nil
}

func recordName(seq uint64) string { return fmt.Sprintf("%020d%s", seq, recordSuffix) }

func parseRecordName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, recordSuffix)
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	return seq, err == nil
}

// readHeader reads a record's header (not its body).
func (s *Spool) readHeader(seq uint64) (Record, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, recordName(seq)))
	if err != nil {
		return Record{}, err
	}
	line, _, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return Record{}, errors.New("spool: record without header")
	}
	var h recordHeader
	if err := json.Unmarshal(line, &h); err != nil || h.V != spoolFormat || h.Route == "" {
		return Record{}, errors.New("spool: bad record header")
	}
	r := h.Record
	r.Seq, r.size = seq, int64(len(b))
	return r, nil
}

// Append writes r durably (see Spool) and returns it with its sequence
// number. Past a cap the oldest records are dropped (DropOverCap). Errors:
// the write or fsync failed (nothing was added).
func (s *Spool) Append(r Record) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Seq = s.nextSeq
	hdr, err := json.Marshal(recordHeader{V: spoolFormat, Record: r})
	if err != nil {
		return Record{}, err
	}
	data := append(append(hdr, '\n'), r.Body...)
	tmp := filepath.Join(s.dir, tmpPrefix+recordName(r.Seq))
	if err := writeSync(tmp, data); err != nil {
		_ = os.Remove(tmp)
		return Record{}, fmt.Errorf("spool: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, recordName(r.Seq))); err != nil {
		_ = os.Remove(tmp)
		return Record{}, fmt.Errorf("spool: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return Record{}, fmt.Errorf("spool: %w", err)
	}
	s.nextSeq++
	r.size = int64(len(data))
	s.index = append(s.index, r)
	s.bytes += r.size
	for len(s.index) > 1 && (len(s.index) > s.maxRecords || s.bytes > s.maxBytes) {
		old := s.index[0]
		s.removeLocked(old.Seq)
		s.drop(DropOverCap, old)
	}
	out := r
	out.Body = nil
	return out, nil
}

func (s *Spool) drop(reason DropReason, r Record) {
	if s.onDrop != nil {
		s.onDrop(reason, r)
	}
}

// List returns the spooled records in order, without bodies (Body reads
// one).
func (s *Spool) List() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.index...)
}

// Body reads r's body bytes exactly as appended. Errors: the record is gone
// or unreadable.
func (s *Spool) Body(r Record) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, recordName(r.Seq)))
	if err != nil {
		return nil, err
	}
	_, body, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return nil, errors.New("spool: record without header")
	}
	return body, nil
}

// Remove deletes the record with seq (after a 2xx, or a drop). Removing a
// record already gone does nothing.
func (s *Spool) Remove(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeLocked(seq)
}

func (s *Spool) removeLocked(seq uint64) error {
	for i, r := range s.index {
		if r.Seq == seq {
			s.index = append(s.index[:i], s.index[i+1:]...)
			s.bytes -= r.size
			break
		}
	}
	if err := os.Remove(filepath.Join(s.dir, recordName(seq))); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// Depth returns how many records the spool holds and their size in bytes.
func (s *Spool) Depth() (records int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.index), s.bytes
}

// writeSync writes data to a new file (0600) and fsyncs it.
func writeSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir fsyncs a directory, so a rename or unlink in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
