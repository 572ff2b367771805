package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the driver chalupa uses

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
)

// The reference server is the "raw limit" of docs/architecture.md's performance measurements: net/http,
// the protocol-v1 HMAC check (protocol.Verify), the JSON body, and ONE SQLite
// transaction per request (BEGIN IMMEDIATE; INSERT nonce; INSERT heartbeat;
// COMMIT) on chalupa's driver and pragmas, through a pool that lets
// concurrent requests each run their own transaction. SQLite admits one
// writer at a time, so concurrent transactions wait on the lock through
// busy_timeout, and every request pays its own WAL fsync: that is the limit a
// group-committing single writer is measured against.
//
// It runs as a child process of the load generator (the same executable,
// re-run with -serve-reference) so that it, like chalupa, is a separate
// process from the client.

// refSchema mirrors chalupa's nonces table and its heartbeats table (same
// columns and indexes — heartbeats has none but its rowid since
// schema/0009; no foreign key, since the reference has no deployments
// table).
const refSchema = `
CREATE TABLE IF NOT EXISTS nonces (
    key_id    TEXT    NOT NULL,
    nonce     TEXT    NOT NULL,
    signed_at INTEGER NOT NULL,
    PRIMARY KEY (key_id, nonce)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS nonces_signed_at ON nonces (signed_at);
CREATE TABLE IF NOT EXISTS heartbeats (
    id                 INTEGER PRIMARY KEY,
    deployment_id      TEXT    NOT NULL,
    key_id             TEXT    NOT NULL,
    received_at        INTEGER NOT NULL,
    sent_at            INTEGER NOT NULL,
    agent_version      TEXT    NOT NULL,
    idle_checks        INTEGER NOT NULL,
    limit_minutes      INTEGER NOT NULL,
    last_activity_at   INTEGER NOT NULL,
    ci_active          INTEGER NOT NULL CHECK (ci_active IN (0, 1)),
    idle_deadline_at   INTEGER NOT NULL,
    session_expires_at INTEGER
) STRICT;
`

// refDSN is storage/db_connect.go's write DSN: busy_timeout first (setting
// journal_mode needs a lock), WAL, synchronous FULL, foreign keys on, and
// _txlock=immediate so that BEGIN takes the write lock.
func refDSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(wal)")
	q.Add("_pragma", "synchronous(full)")
	q.Add("_pragma", "foreign_keys(on)")
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// refServer answers POST /api/ingest/heartbeat.
type refServer struct {
	db      *sql.DB
	keyID   string
	key     []byte
	envSlug string
	now     func() time.Time
}

func openReference(ctx context.Context, dbPath string, conns int) (*sql.DB, error) {
	db, err := sql.Open("sqlite", refDSN(dbPath))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("open reference database: %w", err)
	}
	if mode != "wal" {
		db.Close()
		return nil, fmt.Errorf("reference database journal_mode is %q, want wal", mode)
	}
	if _, err := db.ExecContext(ctx, refSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("create reference schema: %w", err)
	}
	return db, nil
}

func refError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q}}`, code)
}

// ServeHTTP answers GET /api/health and POST /api/ingest/heartbeat: the
// signature and window checks, the strict body, then one transaction.
func (s *refServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/api/health" {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != harness.HeartbeatPath {
		refError(w, http.StatusNotFound, "not_found")
		return
	}
	h := r.Header
	keyID, ts, nonce, sig := h.Get(protocol.HeaderKeyID), h.Get(protocol.HeaderTimestamp), h.Get(protocol.HeaderNonce), h.Get(protocol.HeaderSignature)
	if keyID == "" || ts == "" || nonce == "" || sig == "" {
		refError(w, http.StatusUnauthorized, "missing_headers")
		return
	}
	if !protocol.ValidNonce(nonce) {
		refError(w, http.StatusUnauthorized, "bad_nonce")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, ingest.MaxHeartbeatBody+1))
	if err != nil {
		refError(w, http.StatusBadRequest, "unreadable_body")
		return
	}
	if len(body) > ingest.MaxHeartbeatBody {
		refError(w, http.StatusRequestEntityTooLarge, "body_too_large")
		return
	}
	if keyID != s.keyID {
		refError(w, http.StatusUnauthorized, "unknown_key")
		return
	}
	sec, err := protocol.ParseTimestamp(ts)
	if err != nil {
		refError(w, http.StatusUnauthorized, "bad_timestamp")
		return
	}
	now := s.now()
	if d := now.Unix() - sec; d > int64(ingest.SkewWindow/time.Second) || d < -int64(ingest.SkewWindow/time.Second) {
		refError(w, http.StatusUnauthorized, "timestamp_skew")
		return
	}
	if ok, err := protocol.Verify(s.key, sig, ts, nonce, r.Method, r.URL.Path, body); err != nil || !ok {
		refError(w, http.StatusUnauthorized, "bad_signature")
		return
	}
	var hb protocol.HeartbeatV1
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hb); err != nil {
		refError(w, http.StatusBadRequest, "malformed_json")
		return
	}
	if hb.EnvironmentSlug != s.envSlug {
		refError(w, http.StatusForbidden, "environment_mismatch")
		return
	}
	deadline := hb.Reaper.LastActivityAt.Add(time.Duration(hb.Reaper.LimitMinutes) * time.Minute)

	status, code := s.write(r.Context(), nonce, sec, now, deadline, &hb)
	if status != http.StatusAccepted {
		refError(w, status, code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, `{"accepted":true,"idleDeadlineAt":%q,"serverTime":%q}`,
		deadline.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
}

// write is the one transaction of a request: claim the nonce, store the
// heartbeat, commit (one WAL fsync under synchronous=FULL).
func (s *refServer) write(ctx context.Context, nonce string, signedAt int64, now, deadline time.Time, hb *protocol.HeartbeatV1) (int, string) {
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return http.StatusServiceUnavailable, "begin_failed"
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx,
		`INSERT INTO nonces (key_id, nonce, signed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
		s.keyID, nonce, signedAt*1000)
	if err != nil {
		return http.StatusInternalServerError, "internal"
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return http.StatusConflict, "nonce_replayed"
	}
	var sess any
	if hb.SessionExpiresAt != nil {
		sess = hb.SessionExpiresAt.UnixMilli()
	}
	ci := 0
	if hb.Reaper.CIActive {
		ci = 1
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO heartbeats (deployment_id, key_id, received_at, sent_at, agent_version, idle_checks,
		     limit_minutes, last_activity_at, ci_active, idle_deadline_at, session_expires_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		hb.Deployment.ID, s.keyID, now.UnixMilli(), hb.SentAt.UnixMilli(), hb.AgentVersion, hb.Reaper.IdleChecks,
		hb.Reaper.LimitMinutes, hb.Reaper.LastActivityAt.UnixMilli(), ci, deadline.UnixMilli(), sess); err != nil {
		return http.StatusInternalServerError, "internal"
	}
	if err := tx.Commit(); err != nil {
		return http.StatusServiceUnavailable, "commit_failed"
	}
	return http.StatusAccepted, ""
}

// Environment variables through which the parent hands the reference its
// key (never on the command line, where ps would show it).
const (
	envRefKeyID = "CHALUPA_LOAD_REF_KEY_ID"
	envRefKey   = "CHALUPA_LOAD_REF_KEY"
	envRefEnv   = "CHALUPA_LOAD_REF_ENV"
)

// runReferenceServer is the reference child's main: listen on a loopback
// port, print "LISTENING <addr>" on stdout, serve until SIGTERM/SIGINT.
func runReferenceServer(dbPath string, conns int) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	key, err := protocol.DecodeKeyMaterial(os.Getenv(envRefKey))
	if err != nil {
		return errors.New("reference: " + envRefKey + " must hold key material")
	}
	db, err := openReference(ctx, dbPath, conns)
	if err != nil {
		return err
	}
	defer db.Close()
	return serveChild(ctx, &refServer{db: db, keyID: os.Getenv(envRefKeyID), key: key, envSlug: os.Getenv(envRefEnv), now: time.Now})
}

// runFloorServer is the floor child's main, like runReferenceServer.
func runFloorServer() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return serveChild(ctx, floorServer{})
}

// serveChild serves s on a loopback port with the reference's listener
// settings, printing "LISTENING <addr>" on stdout, until ctx ends.
func serveChild(ctx context.Context, s http.Handler) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    32 << 10,
	}
	fmt.Printf("LISTENING %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}

// startReference runs this executable as the reference server with its
// database in dir (under `taskset -c cpus` when cpus is not empty) and
// returns it once it answers /api/health.
func startReference(ctx context.Context, dir string, cpus []int, conns int, keyID, material, envSlug string) (*harness.Server, error) {
	return startChild(ctx, "reference", dir, cpus,
		[]string{"-serve-reference", "-ref-db", filepath.Join(dir, "reference.db"), "-ref-conns", fmt.Sprint(conns)},
		[]string{envRefKeyID + "=" + keyID, envRefKey + "=" + material, envRefEnv + "=" + envSlug})
}

// startFloor runs this executable as the floor server (floor.go), placed
// like startReference.
func startFloor(ctx context.Context, dir string, cpus []int) (*harness.Server, error) {
	return startChild(ctx, "floor", dir, cpus, []string{"-serve-floor"}, nil)
}

// startChild runs this executable with args and env added to the base
// environment, logging to dir/NAME.log, and returns it once it answers
// /api/health.
func startChild(ctx context.Context, name, dir string, cpus []int, args, env []string) (*harness.Server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd, err := harness.Command(cpus, exe, args...)
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.Env = append(harness.BaseEnv(), env...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	srv := harness.NewServer(name, cmd, logf, logPath)
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		first := true
		for sc.Scan() {
			if first {
				first = false
				if a, ok := strings.CutPrefix(sc.Text(), "LISTENING "); ok {
					addrc <- a
					continue
				}
			}
			fmt.Fprintln(logf, sc.Text())
		}
		close(addrc)
	}()
	select {
	case a, ok := <-addrc:
		if !ok {
			srv.Stop(5 * time.Second)
			return nil, fmt.Errorf("%s server did not start: %s", name, srv.LogTail())
		}
		srv.URL = "http://" + a
	case <-time.After(30 * time.Second):
		srv.Stop(5 * time.Second)
		return nil, fmt.Errorf("%s server did not report its address within 30s", name)
	case <-ctx.Done():
		srv.Stop(5 * time.Second)
		return nil, ctx.Err()
	}
	if err := srv.WaitHealthy(ctx, 30*time.Second); err != nil {
		srv.Stop(5 * time.Second)
		return nil, err
	}
	return srv, nil
}
