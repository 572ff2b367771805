package logship

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
	"time"
)

// chunkSuffix names a complete chunk file; temporaries start with tmpPrefix
// and are removed at open.
const (
	chunkSuffix = ".chunk"
	tmpPrefix   = ".tmp-"
	stateName   = "state.json"
)

// chunk is one spooled chunk: its header (the first line of its file) and,
// once read, its compressed bytes.
type chunk struct {
	// ID orders chunks locally; it is not the wire seq.
	ID uint64 `json:"-"`
	// Session and Seq are the wire identity, set durably just before the
	// chunk's first plan (Seq -1: not yet assigned); a replay plans the
	// same (Session, Seq, SHA256).
	Session string `json:"session,omitempty"`
	Seq     int64  `json:"seq"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	// Cursor is the source's position just after the chunk's lines.
	Cursor string `json:"cursor"`
	// Spooled is when the chunk was cut (zero in chunks of older agents).
	Spooled time.Time `json:"spooled,omitzero"`
	body    []byte
}

func chunkName(id uint64) string { return fmt.Sprintf("%020d%s", id, chunkSuffix) }

// state is a service's durable state (state.json beside its chunks).
type state struct {
	// Session is this run's session; Cursor the source's position after
	// the last chunk spooled.
	Session string `json:"session"`
	Cursor  string `json:"cursor"`
	// Sessions counts, per session, the seqs assigned and their bytes
	// (the final payload's chunks and bytes).
	Sessions map[string]*sessionCount `json:"sessions"`
	// Finishes are final payloads not yet answered, sent once their
	// session has no chunk left, byte-identical on every replay.
	Finishes []finish `json:"finishes"`
	// Dropped counts chunks dropped unsent (the local bound, a refusal).
	Dropped int64 `json:"dropped"`
	// Mismatched counts the dropped chunks the daemon refused
	// object_mismatch MaxUploads times.
	Mismatched int64 `json:"mismatched,omitempty"`
	// Opened is the last session the daemon accepted; Refusal is why
	// shipping is paused ("STEP STATUS CODE", or "STEP no answer"), ""
	// once a pass ships. Both are for `agent status`.
	Opened  string `json:"opened,omitempty"`
	Refusal string `json:"refusal,omitempty"`
}

type sessionCount struct {
	NextSeq int64 `json:"nextSeq"`
	Bytes   int64 `json:"bytes"`
}

type finish struct {
	Session string          `json:"session"`
	Final   json.RawMessage `json:"final"`
}

// writeAtomic writes data to path through a synced temporary file and a
// rename, then syncs the directory.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp := filepath.Join(dir, tmpPrefix+filepath.Base(path))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// spool is one service's directory: state.json and one file per chunk.
type spool struct {
	dir    string
	st     state
	chunks []chunk // by ID; bodies not held
	bytes  int64
	nextID uint64
}

// openSpool reads dir (creating it, 0700): the state, then the chunks; a
// chunk newer than the state (a crash between the two writes) moves the
// state's cursor and counters forward.
func openSpool(dir string) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &spool{dir: dir, nextID: 1}
	b, err := os.ReadFile(filepath.Join(dir, stateName))
	if err == nil {
		if err := json.Unmarshal(b, &s.st); err != nil {
			return nil, fmt.Errorf("log spool state: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if s.st.Sessions == nil {
		s.st.Sessions = map[string]*sessionCount{}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			os.Remove(filepath.Join(dir, name))
			continue
		}
		digits, ok := strings.CutSuffix(name, chunkSuffix)
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(digits, 10, 64)
		if err != nil {
			continue
		}
		c, err := s.readChunk(id, false)
		if err != nil {
			os.Remove(filepath.Join(dir, name))
			s.st.Dropped++
			continue
		}
		s.chunks = append(s.chunks, c)
		s.bytes += c.Size
		s.nextID = max(s.nextID, id+1)
	}
	sort.Slice(s.chunks, func(i, j int) bool { return s.chunks[i].ID < s.chunks[j].ID })
	if n := len(s.chunks); n > 0 {
		s.st.Cursor = s.chunks[n-1].Cursor
	}
	for _, c := range s.chunks {
		if c.Seq < 0 {
			continue
		}
		sc := s.count(c.Session)
		if c.Seq >= sc.NextSeq {
			sc.NextSeq, sc.Bytes = c.Seq+1, sc.Bytes+c.Size
		}
	}
	return s, nil
}

func (s *spool) count(session string) *sessionCount {
	sc := s.st.Sessions[session]
	if sc == nil {
		sc = &sessionCount{}
		s.st.Sessions[session] = sc
	}
	return sc
}

func (s *spool) readChunk(id uint64, body bool) (chunk, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, chunkName(id)))
	if err != nil {
		return chunk{}, err
	}
	line, rest, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return chunk{}, errors.New("log spool: chunk without header")
	}
	var c chunk
	if err := json.Unmarshal(line, &c); err != nil || c.SHA256 == "" || c.Size != int64(len(rest)) {
		return chunk{}, errors.New("log spool: bad chunk")
	}
	c.ID = id
	if body {
		c.body = rest
	}
	return c, nil
}

func (s *spool) writeChunk(c chunk, body []byte) error {
	hdr, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.dir, chunkName(c.ID)), append(append(hdr, '\n'), body...))
}

// add spools a new chunk (unassigned) durably, then the state's cursor.
func (s *spool) add(body []byte, sha, cursor string, now time.Time) error {
	c := chunk{ID: s.nextID, Seq: -1, Size: int64(len(body)), SHA256: sha, Cursor: cursor, Spooled: now.UTC()}
	if err := s.writeChunk(c, body); err != nil {
		return err
	}
	s.nextID++
	s.chunks = append(s.chunks, c)
	s.bytes += c.Size
	s.st.Cursor = cursor
	return s.save()
}

// assign gives chunk i the session's next seq, durably, before its first
// plan.
func (s *spool) assign(i int, session string) error {
	c := s.chunks[i]
	body, err := s.readChunk(c.ID, true)
	if err != nil {
		return err
	}
	sc := s.count(session)
	c.Session, c.Seq = session, sc.NextSeq
	if err := s.writeChunk(c, body.body); err != nil {
		return err
	}
	s.chunks[i] = c
	sc.NextSeq++
	sc.Bytes += c.Size
	return s.save()
}

// remove deletes chunk i (committed, or dropped).
func (s *spool) remove(i int) error {
	c := s.chunks[i]
	s.chunks = append(s.chunks[:i], s.chunks[i+1:]...)
	s.bytes -= c.Size
	if err := os.Remove(filepath.Join(s.dir, chunkName(c.ID))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (s *spool) save() error {
	b, err := json.Marshal(s.st)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.dir, stateName), b)
}

// Session states in a SpoolStatus.
const (
	// SessionStopped: no run holds a session (the agent is stopped, or
	// stopped cleanly and has not started since).
	SessionStopped = "stopped"
	// SessionOpen: the daemon accepted this run's session.
	SessionOpen = "open"
	// SessionRefused: shipping is paused (Refusal says why) and this
	// run's session is not accepted.
	SessionRefused = "refused"
	// SessionPending: this run's session has not been asked for yet
	// (nothing to ship so far).
	SessionPending = "pending"
)

// SpoolStatus is one service's log spool as `chalupa agent status`
// reports it (docs/operations.md, "Agent").
type SpoolStatus struct {
	// Service is the unit name or file label (the spool's directory).
	Service string `json:"service"`
	// Chunks and Bytes are the chunks waiting and their compressed size
	// (bytes); Numbered counts those already given a seq.
	Chunks   int   `json:"chunks"`
	Bytes    int64 `json:"bytes"`
	Numbered int   `json:"numbered"`
	// Oldest is when the oldest waiting chunk was cut (its file's
	// modification time for chunks of older agents).
	Oldest time.Time `json:"oldest,omitzero"`
	// Dropped counts chunks dropped unsent since the spool was made.
	Dropped int64 `json:"dropped"`
	// Mismatched counts the dropped chunks whose upload was stored as
	// other bytes MaxUploads times (object_mismatch).
	Mismatched int64 `json:"mismatched"`
	// Session is the running (or last crashed) run's session, "" when
	// stopped; SessionState one of the Session* states.
	Session      string `json:"session,omitempty"`
	SessionState string `json:"sessionState"`
	// Refusal is why shipping is paused ("STEP STATUS CODE"), "" when not.
	Refusal string `json:"refusal,omitempty"`
	// Finishes counts final payloads waiting to be answered.
	Finishes int `json:"finishes"`
	// Error is why the spool could not be read.
	Error string `json:"error,omitempty"`
}

// Inspect reports every service spool under the agent's state dir, by
// service name, reading only: nothing is created, removed or rewritten,
// so it is safe beside a running agent. A missing logs directory is no
// spool and no error.
func Inspect(stateDir string) []SpoolStatus {
	root := filepath.Join(stateDir, "logs")
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []SpoolStatus
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, inspectOne(filepath.Join(root, e.Name()), e.Name()))
		}
	}
	return out
}

func inspectOne(dir, service string) SpoolStatus {
	out := SpoolStatus{Service: service, SessionState: SessionStopped}
	var st state
	if b, err := os.ReadFile(filepath.Join(dir, stateName)); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			out.Error = "state.json: " + err.Error()
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		out.Error = err.Error()
	}
	out.Dropped, out.Mismatched, out.Session, out.Refusal, out.Finishes = st.Dropped, st.Mismatched, st.Session, st.Refusal, len(st.Finishes)
	switch {
	case st.Session == "":
	case st.Opened == st.Session:
		out.SessionState = SessionOpen
	case st.Refusal != "":
		out.SessionState = SessionRefused
	default:
		out.SessionState = SessionPending
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	sp := &spool{dir: dir}
	for _, e := range entries {
		digits, ok := strings.CutSuffix(e.Name(), chunkSuffix)
		if !ok || strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		id, err := strconv.ParseUint(digits, 10, 64)
		if err != nil {
			continue
		}
		c, err := sp.readChunk(id, false)
		if err != nil {
			continue // gone meanwhile (shipped), or unreadable: the next start drops it
		}
		at := c.Spooled
		if at.IsZero() {
			if fi, err := e.Info(); err == nil {
				at = fi.ModTime().UTC()
			}
		}
		if out.Oldest.IsZero() || at.Before(out.Oldest) {
			out.Oldest = at
		}
		out.Chunks++
		out.Bytes += c.Size
		if c.Seq >= 0 {
			out.Numbered++
		}
	}
	return out
}
