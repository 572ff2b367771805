// Package logship is the agent's side of the private log broker
// (docs/operations.md, "Logs"): for each configured service it reads
// lines from a Source, cuts gzip chunks, keeps each in a durable spool with
// its SHA-256 before planning it, and ships it plan → PUT (straight to
// object storage, with a presigned URL) → commit; a session per service
// and agent run is finished with a final payload kept in the spool, so
// every step replays identically after either side restarts.
package logship

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/protocol"
)

// Bounds and paces (docs/operations.md, "Logs").
const (
	// FlushInterval is the longest a line waits in memory before it is cut
	// into a chunk: a quiet service's lines still arrive within a minute.
	FlushInterval = 60 * time.Second
	// SpoolMaxBytes bounds one service's spooled chunks (compressed
	// bytes): the daemon's per-deployment byte quota, since more could
	// never be stored. Past it the oldest chunks not yet planned are
	// dropped, counted.
	SpoolMaxBytes = protocol.DefaultDeploymentBytes
	// readBlock is one read from a source: small beside a chunk, so a cut
	// falls close to the target and on a cursor.
	readBlock = 64 << 10
	// maxReadPerTick bounds what one tick reads from its source (bytes), so
	// a huge backlog is cut and shipped in steps.
	maxReadPerTick = 16 << 20
	// MaxUploads bounds the uploads of one chunk the daemon refuses 422
	// object_mismatch in one pass (the stored object was not the chunk:
	// another upload with the grant raced it, or the store changed it):
	// the chunk is planned again (the grant renewed for the same key) and
	// uploaded again at once, and after the third mismatch it is dropped,
	// counted in Mismatched and Dropped — a store that keeps other bytes
	// must not stop the service's shipping behind one chunk
	// (docs/operations.md, "Agent").
	MaxUploads = 3
	// UploadTimeout bounds one PUT of at most a chunk's megabyte.
	UploadTimeout = 60 * time.Second
	// RetryMin and RetryMax bound the back-off after a failed or refused
	// request; a daemon without log storage is asked again every RetryMax.
	RetryMin = 5 * time.Second
	RetryMax = 5 * time.Minute
	// RetryAfterMax caps a server's Retry-After (a 429 of the rate quotas,
	// a 503), so a bogus header cannot park shipping for days; a longer
	// Retry-After than the back-off is honoured up to it.
	RetryAfterMax = time.Hour
	// Routes of the protocol.
	openRoute   = "/api/ingest/logs/sessions"
	planRoute   = "/api/ingest/logs/plan"
	commitRoute = "/api/ingest/logs/commit"
	finishRoute = "/api/ingest/logs/finish"
)

// ErrPaused: a request failed or was refused in a way a later attempt can
// get past (503 logs_not_configured, 5xx, 429, a transport error, a
// service off the allowlist); the spool keeps everything.
var ErrPaused = errors.New("log shipping paused")

// Config is one service's shipper.
type Config struct {
	// Service is the unit name or file label (protocol.ValidService).
	Service string
	// Source yields the lines; OpenSource opens it at a saved cursor.
	OpenSource func(cursor string) Source
	// Dir is the service's spool directory.
	Dir string
	// Environment and Deployment name the deployment.
	Environment, Deployment string
	// Client signs the protocol's requests; HTTP sends the PUTs (never
	// to chalupa).
	Client *protocol.Client
	HTTP   *http.Client
	Clock  clockwork.Clock
	Log    zerolog.Logger
	// SpoolMaxBytes overrides SpoolMaxBytes (tests).
	SpoolMaxBytes int64
}

// Shipper ships one service's logs. Tick is one step; Run drives it.
type Shipper struct {
	cfg     Config
	sp      *spool
	src     Source
	pending []segment
	since   time.Time // when the oldest pending segment was read
	target  int       // raw bytes per chunk, adapted to the compression
	maxSize int64
	opened  map[string]bool
	backoff time.Duration
	until   time.Time
	// retryAfter is the last refusal's Retry-After (0: none).
	retryAfter time.Duration
	// why and code describe the last refusal of this pass (for Refusal
	// and TickResult.Code).
	why, code string
}

type segment struct {
	data   []byte
	cursor string
}

// TickResult is what one Tick did.
type TickResult struct {
	// Read counts source bytes read; Spooled chunks cut; Committed chunks
	// committed; Finished sessions answered; Dropped chunks dropped.
	Read                                  int64
	Spooled, Committed, Finished, Dropped int
	// Paused is set when a request failed or was refused (Code its error
	// code, "" for no answer); the rest waits for the back-off.
	Paused bool
	Code   string
}

// Open opens the service's spool and source and starts this run's
// session; an earlier run's session still unfinished (a crash) gets its
// final payload (reason "restart") spooled. Errors: the spool cannot be
// read or written.
func Open(cfg Config) (*Shipper, error) {
	if !protocol.ValidService(cfg.Service) {
		return nil, fmt.Errorf("log service %q: must be 1-128 characters of [A-Za-z0-9@._:-]", cfg.Service)
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.SpoolMaxBytes <= 0 {
		cfg.SpoolMaxBytes = SpoolMaxBytes
	}
	sp, err := openSpool(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Shipper{cfg: cfg, sp: sp, target: 4 * protocol.DefaultMaxChunkBytes, maxSize: protocol.DefaultMaxChunkBytes, opened: map[string]bool{}}
	if old := sp.st.Session; old != "" && !s.finishing(old) {
		if err := s.spoolFinish(old, "restart"); err != nil {
			return nil, err
		}
	}
	now := cfg.Clock.Now()
	sp.st.Session = ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
	if err := sp.save(); err != nil {
		return nil, err
	}
	s.src = cfg.OpenSource(sp.st.Cursor)
	return s, nil
}

// Session is this run's session id.
func (s *Shipper) Session() string { return s.sp.st.Session }

// Dropped counts chunks dropped unsent since the spool was made.
func (s *Shipper) Dropped() int64 { return s.sp.st.Dropped }

// Mismatched counts chunks dropped after MaxUploads object_mismatch
// refusals since the spool was made (also counted in Dropped).
func (s *Shipper) Mismatched() int64 { return s.sp.st.Mismatched }

// Spooled is how many chunks wait in the spool and their bytes.
func (s *Shipper) Spooled() (int, int64) { return len(s.sp.chunks), s.sp.bytes }

func (s *Shipper) finishing(session string) bool {
	for _, f := range s.sp.st.Finishes {
		if f.Session == session {
			return true
		}
	}
	return false
}

// spoolFinish keeps session's final payload (exact bytes) for sending.
func (s *Shipper) spoolFinish(session, reason string) error {
	sc := s.sp.count(session)
	cursor := s.sp.st.Cursor
	if len(cursor) > 512 {
		cursor = cursor[:512]
	}
	b, err := json.Marshal(protocol.FinalV1{Chunks: sc.NextSeq, Bytes: sc.Bytes, Cursor: cursor, Reason: reason})
	if err != nil {
		return err
	}
	s.sp.st.Finishes = append(s.sp.st.Finishes, finish{Session: session, Final: b})
	return s.sp.save()
}

// Tick reads what the source has (at most maxReadPerTick), cuts chunks
// when the pending lines reach the target size or waited FlushInterval,
// then, outside a back-off, ships the spool in order and sends the
// finishes whose sessions have no chunk left. Errors: the spool cannot be
// written (a refusal is TickResult.Paused, not an error).
func (s *Shipper) Tick(ctx context.Context) (TickResult, error) {
	var res TickResult
	if err := s.read(&res, false); err != nil {
		return res, err
	}
	if s.cfg.Clock.Now().Before(s.until) {
		res.Paused = true
		return res, nil
	}
	s.why, s.code, s.retryAfter = "", "", 0
	err := s.ship(ctx, &res)
	if errors.Is(err, ErrPaused) {
		s.pause()
		res.Paused, res.Code = true, s.code
		if s.why == "" {
			s.why = "no answer"
		}
		s.note(s.why)
		return res, nil
	}
	if err == nil {
		s.backoff, s.until = 0, time.Time{}
		s.note("")
	}
	return res, err
}

// note keeps why shipping is paused ("" once a pass ships) in the state
// file for `agent status`, written only when it changes.
func (s *Shipper) note(why string) {
	if s.sp.st.Refusal == why {
		return
	}
	s.sp.st.Refusal = why
	if err := s.sp.save(); err != nil {
		s.cfg.Log.Warn().Err(err).Str("service", s.cfg.Service).Msg("log spool: save")
	}
}

// read pulls from the source and cuts chunks (all: cut whatever is
// pending, at shutdown).
func (s *Shipper) read(res *TickResult, all bool) error {
	for res.Read < maxReadPerTick {
		b, cur, err := s.src.Read(readBlock)
		if err != nil {
			s.cfg.Log.Warn().Err(err).Str("service", s.cfg.Service).Msg("log source failing")
			break
		}
		if len(b) == 0 {
			break
		}
		if len(s.pending) == 0 {
			s.since = s.cfg.Clock.Now()
		}
		s.pending = append(s.pending, segment{data: b, cursor: cur})
		res.Read += int64(len(b))
		if s.pendingBytes() >= s.target {
			if err := s.cut(res); err != nil {
				return err
			}
		}
	}
	for len(s.pending) > 0 && (all || s.pendingBytes() >= s.target || !s.cfg.Clock.Now().Before(s.since.Add(FlushInterval))) {
		if err := s.cut(res); err != nil {
			return err
		}
	}
	return nil
}

func (s *Shipper) pendingBytes() int {
	n := 0
	for _, g := range s.pending {
		n += len(g.data)
	}
	return n
}

// cut compresses a prefix of the pending segments of about the target
// size into one chunk of at most maxSize bytes and spools it.
func (s *Shipper) cut(res *TickResult) error {
	n, raw := 0, 0
	for n < len(s.pending) && (n == 0 || raw+len(s.pending[n].data) <= s.target) {
		raw += len(s.pending[n].data)
		n++
	}
	for {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		raw = 0
		for _, g := range s.pending[:n] {
			zw.Write(g.data)
			raw += len(g.data)
		}
		if err := zw.Close(); err != nil {
			return err
		}
		if int64(buf.Len()) > s.maxSize && n > 1 {
			n /= 2
			continue
		}
		if int64(buf.Len()) > s.maxSize {
			// One read block that does not compress below the bound
			// cannot happen (64 KiB); refuse to spool it rather than
			// have the daemon refuse it.
			return fmt.Errorf("log chunk of %d bytes over the %d-byte bound", buf.Len(), s.maxSize)
		}
		// Aim the next chunk at 90 % of the bound at this ratio.
		s.target = max(readBlock, int(float64(raw)*0.9*float64(s.maxSize)/float64(max(buf.Len(), 1))))
		sum := sha256.Sum256(buf.Bytes())
		if err := s.sp.add(buf.Bytes(), hex.EncodeToString(sum[:]), s.pending[n-1].cursor, s.cfg.Clock.Now()); err != nil {
			return err
		}
		s.pending = append(s.pending[:0:0], s.pending[n:]...)
		s.since = s.cfg.Clock.Now()
		res.Spooled++
		s.bound(res)
		return nil
	}
}

// bound drops the oldest unassigned chunks past the spool's byte bound.
func (s *Shipper) bound(res *TickResult) {
	for i := 0; s.sp.bytes > s.cfg.SpoolMaxBytes && i < len(s.sp.chunks)-1; {
		if s.sp.chunks[i].Seq >= 0 {
			i++
			continue
		}
		if err := s.sp.remove(i); err != nil {
			s.cfg.Log.Warn().Err(err).Msg("log spool: remove")
			return
		}
		s.sp.st.Dropped++
		res.Dropped++
	}
	if res.Dropped > 0 {
		_ = s.sp.save()
		s.cfg.Log.Warn().Str("service", s.cfg.Service).Int64("dropped", s.sp.st.Dropped).Msg("log spool full: oldest chunks dropped")
	}
}

// pause sets the back-off: doubled from RetryMin to RetryMax, or the
// refusal's Retry-After when longer (a 429 of the rate quotas says when
// the bucket holds a token again; docs/operations.md, "Quotas").
func (s *Shipper) pause() {
	if s.backoff == 0 {
		s.backoff = RetryMin
	} else {
		s.backoff = min(2*s.backoff, RetryMax)
	}
	s.until = s.cfg.Clock.Now().Add(max(s.backoff, s.retryAfter))
}

// post sends one signed request; a 2xx answer's body is returned.
func (s *Shipper) post(ctx context.Context, route string, v any) ([]byte, int, string, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, 0, "", err
	}
	return s.postRaw(ctx, route, body)
}

func (s *Shipper) postRaw(ctx context.Context, route string, body []byte) ([]byte, int, string, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := s.cfg.Client.Post(rctx, route, body)
	if err != nil || resp == nil {
		s.why = stepOf(route) + " no answer"
		return nil, 0, "", fmt.Errorf("%w: %s: %v", ErrPaused, route, err)
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if resp.Status/100 != 2 {
		_ = json.Unmarshal(resp.Body, &e)
		if resp.Status == http.StatusTooManyRequests || resp.Status == http.StatusServiceUnavailable {
			if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
				s.retryAfter = min(time.Duration(n)*time.Second, RetryAfterMax)
			}
		}
	}
	return resp.Body, resp.Status, e.Error.Code, nil
}

// stepOf names a route's protocol step as refusals name it.
func stepOf(route string) string {
	switch route {
	case openRoute:
		return "open"
	case planRoute:
		return "plan"
	case commitRoute:
		return "commit"
	}
	return "finish"
}

// refused logs a refusal once per pause and returns ErrPaused.
func (s *Shipper) refused(what string, status int, code string) error {
	ev := s.cfg.Log.Warn()
	if code == "logs_not_configured" {
		ev = s.cfg.Log.Info()
	}
	ev.Str("service", s.cfg.Service).Str("step", what).Int("status", status).Str("code", code).Msg("log shipping paused; chunks stay spooled")
	s.why, s.code = strings.TrimSpace(fmt.Sprintf("%s %d %s", what, status, code)), code
	return fmt.Errorf("%w: %s %d %s", ErrPaused, what, status, code)
}

// ship plans, uploads and commits the spooled chunks in order, then sends
// the finishes whose sessions have no chunk left.
func (s *Shipper) ship(ctx context.Context, res *TickResult) error {
	for len(s.sp.chunks) > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %v", ErrPaused, err)
		}
		done, err := s.shipOne(ctx, false)
		if err != nil {
			return err
		}
		if done {
			res.Committed++
		} else {
			res.Dropped++
		}
	}
	for len(s.sp.st.Finishes) > 0 {
		f := s.sp.st.Finishes[0]
		if f.Session == s.sp.st.Session {
			break // this run's, sent at Stop
		}
		body, err := json.Marshal(struct {
			EnvironmentSlug string          `json:"environmentSlug"`
			DeploymentID    string          `json:"deploymentId"`
			SessionID       string          `json:"sessionId"`
			Final           json.RawMessage `json:"final"`
		}{s.cfg.Environment, s.cfg.Deployment, f.Session, f.Final})
		if err != nil {
			return err
		}
		_, status, code, err := s.postRaw(ctx, finishRoute, body)
		if err != nil {
			return err
		}
		switch {
		case status/100 == 2:
			res.Finished++
		case status == http.StatusNotFound && code == "log_session_not_found",
			status == http.StatusConflict && (code == "final_conflict" || code == "deployment_ended"):
			// Never opened (it shipped nothing), or finished with another
			// payload: nothing a resend could change.
			s.cfg.Log.Info().Str("service", s.cfg.Service).Str("session", f.Session).Str("code", code).Msg("log session finish dropped")
		default:
			return s.refused("finish", status, code)
		}
		s.sp.st.Finishes = s.sp.st.Finishes[1:]
		delete(s.sp.st.Sessions, f.Session)
		if err := s.sp.save(); err != nil {
			return err
		}
	}
	return nil
}

// open opens session (once per process: a replay is answered 202).
func (s *Shipper) open(ctx context.Context, session string) error {
	if s.opened[session] {
		return nil
	}
	b, status, code, err := s.post(ctx, openRoute, protocol.OpenV1{EnvironmentSlug: s.cfg.Environment, DeploymentID: s.cfg.Deployment, SessionID: session, Service: s.cfg.Service})
	if err != nil {
		return err
	}
	if status/100 != 2 {
		return s.refused("open", status, code)
	}
	var o protocol.LogSessionOpened
	if json.Unmarshal(b, &o) == nil && o.MaxChunkBytes > 0 {
		s.maxSize = o.MaxChunkBytes
	}
	s.opened[session] = true
	if session == s.sp.st.Session && s.sp.st.Opened != session {
		s.sp.st.Opened = session
		if err := s.sp.save(); err != nil {
			return err
		}
	}
	return nil
}

// shipOne ships the oldest chunk: true when committed, false when dropped.
// moved is set once the chunk was moved to a fresh session (it moves once).
func (s *Shipper) shipOne(ctx context.Context, moved bool) (bool, error) {
	c := s.sp.chunks[0]
	if c.Seq < 0 {
		// Open first: a chunk gets its seq only once its session is
		// accepted, so while the daemon refuses, every chunk can still be
		// dropped by the local bound without leaving a gap.
		if err := s.open(ctx, s.sp.st.Session); err != nil {
			return false, err
		}
		if err := s.sp.assign(0, s.sp.st.Session); err != nil {
			return false, err
		}
		c = s.sp.chunks[0]
	}
	if err := s.open(ctx, c.Session); err != nil {
		return false, err
	}
	chunk := protocol.ChunkV1{EnvironmentSlug: s.cfg.Environment, DeploymentID: s.cfg.Deployment, SessionID: c.Session, Seq: c.Seq, Size: c.Size, SHA256: c.SHA256}
	b, status, code, err := s.post(ctx, planRoute, chunk)
	if err != nil {
		return false, err
	}
	switch {
	case status/100 == 2:
	case status == http.StatusConflict && (code == "log_session_expired" || code == "log_session_finished" || code == "sequence_gap" || code == "chunk_conflict"),
		status == http.StatusNotFound && code == "log_session_not_found":
		// The seq was never planned (a refusal writes nothing): it moves
		// to this run's session, a fresh one when that is the one refused.
		if moved {
			return false, s.refused("plan", status, code)
		}
		sc := s.sp.count(c.Session)
		if sc.NextSeq == c.Seq+1 {
			sc.NextSeq, sc.Bytes = c.Seq, sc.Bytes-c.Size
		}
		if c.Session == s.sp.st.Session {
			if err := s.spoolFinish(c.Session, "expired"); err != nil {
				return false, err
			}
			s.sp.st.Session = ulid.MustNew(ulid.Timestamp(s.cfg.Clock.Now()), ulid.DefaultEntropy()).String()
		}
		if err := s.sp.assign(0, s.sp.st.Session); err != nil {
			return false, err
		}
		return s.shipOne(ctx, true)
	case status == http.StatusUnprocessableEntity && code == "chunk_too_large":
		return false, s.drop(code)
	default:
		return false, s.refused("plan", status, code)
	}
	for uploads := 1; ; uploads++ {
		var p protocol.LogChunkPlanned
		if err := json.Unmarshal(b, &p); err != nil {
			return false, fmt.Errorf("%w: plan answer: %v", ErrPaused, err)
		}
		if p.Committed {
			break
		}
		if p.Upload == nil {
			return false, fmt.Errorf("%w: plan answer without a grant", ErrPaused)
		}
		full, err := s.sp.readChunk(c.ID, true)
		if err != nil {
			return false, s.drop("unreadable")
		}
		if err := s.put(ctx, p.Upload, full.body); err != nil {
			return false, err
		}
		_, status, code, err = s.post(ctx, commitRoute, chunk)
		if err != nil {
			return false, err
		}
		if status/100 == 2 {
			break
		}
		if status != http.StatusUnprocessableEntity || code != "object_mismatch" {
			// object_missing: the next pass plans again (renewing the
			// grant for the same key) and uploads again.
			return false, s.refused("commit", status, code)
		}
		// The daemon deleted the other bytes; the plan stays.
		if uploads == MaxUploads {
			s.sp.st.Mismatched++
			s.cfg.Log.Error().Str("service", s.cfg.Service).Str("session", c.Session).Int64("seq", c.Seq).Int("uploads", uploads).
				Int64("mismatched", s.sp.st.Mismatched).Msg("log chunk stored as other bytes every time: dropped")
			return false, s.drop(code)
		}
		s.cfg.Log.Warn().Str("service", s.cfg.Service).Str("session", c.Session).Int64("seq", c.Seq).Int("uploads", uploads).
			Msg("log chunk stored as other bytes: uploading it again under a renewed grant")
		if b, status, code, err = s.post(ctx, planRoute, chunk); err != nil {
			return false, err
		}
		if status/100 != 2 {
			return false, s.refused("plan", status, code)
		}
	}
	if err := s.sp.remove(0); err != nil {
		return false, err
	}
	return true, nil
}

func (s *Shipper) drop(why string) error {
	s.cfg.Log.Error().Str("service", s.cfg.Service).Str("code", why).Msg("log chunk dropped")
	if err := s.sp.remove(0); err != nil {
		return err
	}
	s.sp.st.Dropped++
	return s.sp.save()
}

// withoutURL returns err without the request URL net/http wraps it in: a
// grant's URL carries its signature, which is never logged or returned
// (docs/operations.md, "Logs").
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// put uploads body with the grant: exactly its headers, to its URL, with
// the shipper's own HTTP client (no chalupa credentials).
func (s *Shipper) put(ctx context.Context, up *protocol.LogUpload, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, up.Method, up.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: upload: %v", ErrPaused, withoutURL(err))
	}
	for k, v := range up.Headers {
		req.Header.Set(k, v)
	}
	req.ContentLength = int64(len(body))
	hc := s.cfg.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: UploadTimeout}
	}
	resp, err := hc.Do(req)
	if err != nil {
		s.why = "upload no answer"
		return fmt.Errorf("%w: upload: %v", ErrPaused, withoutURL(err))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return s.refused("upload", resp.StatusCode, "")
	}
	return nil
}

// Stop cuts whatever is pending, spools this run's final payload
// (reason "shutdown") when the daemon accepted its session (else its
// chunks stay unnumbered, for the next run's session) and ships for as
// long as ctx lasts. What is not
// answered stays spooled for the next start. It returns what it did.
func (s *Shipper) Stop(ctx context.Context) (TickResult, error) {
	var res TickResult
	defer s.src.Close()
	if err := s.read(&res, true); err != nil {
		return res, err
	}
	s.why, s.code = "", ""
	paused := func() {
		res.Paused = true
		if s.why == "" {
			s.why = "no answer"
		}
		s.note(s.why)
	}
	session := s.sp.st.Session
	unnumbered := false
	for _, c := range s.sp.chunks {
		unnumbered = unnumbered || c.Seq < 0
	}
	accepted := s.opened[session] || (unnumbered && s.open(ctx, session) == nil)
	if accepted {
		// Give every chunk of this run its seq first: the final payload
		// counts them, and a plan after finish would be refused.
		for i, c := range s.sp.chunks {
			if c.Seq < 0 {
				if err := s.sp.assign(i, session); err != nil {
					return res, err
				}
			}
		}
		if err := s.spoolFinish(session, "shutdown"); err != nil {
			return res, err
		}
	}
	// A session never opened (it is this process's own, so no one else
	// opened it) has nothing to finish: while the daemon refuses, its
	// chunks stay unnumbered, so the spool's bound can still drop them
	// across restarts, and the next run's session takes them once
	// accepted.
	s.sp.st.Session = ""
	if err := s.sp.save(); err != nil {
		return res, err
	}
	if !accepted && unnumbered {
		// The daemon refused this run's session just now: the rest waits
		// for the next start.
		paused()
		return res, nil
	}
	if err := s.ship(ctx, &res); errors.Is(err, ErrPaused) {
		paused()
	} else if err != nil {
		return res, err
	} else {
		s.note("")
	}
	return res, nil
}

// Run ticks every interval (at once again while a backlog fills whole
// ticks) until ctx ends, then stops within stopTimeout.
func (s *Shipper) Run(ctx context.Context, interval, stopTimeout time.Duration) {
	for {
		res, err := s.Tick(ctx)
		if err != nil {
			s.cfg.Log.Error().Err(err).Str("service", s.cfg.Service).Msg("log shipping")
		}
		var next <-chan time.Time
		if err == nil && !res.Paused && res.Read >= maxReadPerTick {
			// A backlog: read on at once rather than a tick's worth every
			// interval.
			c := make(chan time.Time)
			close(c)
			next = c
		} else {
			next = s.cfg.Clock.After(interval)
		}
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithCancel(context.Background())
			t := s.cfg.Clock.AfterFunc(stopTimeout, cancel)
			r, err := s.Stop(sctx)
			t.Stop()
			cancel()
			n, b := s.Spooled()
			s.cfg.Log.Info().Err(err).Str("service", s.cfg.Service).Int("committed", r.Committed).Int("spooled", n).Int64("spooledBytes", b).Msg("log shipping stopped")
			return
		case <-next:
		}
	}
}

// DirFor is the spool directory of service under the agent's state dir.
func DirFor(stateDir, service string) string { return filepath.Join(stateDir, "logs", service) }
