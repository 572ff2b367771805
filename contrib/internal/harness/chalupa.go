// Package harness is what contrib's measurement tools (contrib/load,
// contrib/soak) share: it builds and starts the real chalupa binary on
// loopback with a fresh data directory, issues an ingest key through the
// admin API, drives signed heartbeats (closed loop and open loop, with
// latency histograms), places processes on CPUs, and reads process
// statistics from /proc. Everything talks to 127.0.0.1 only.
package harness

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/protocol"
)

// ChalupaStopGrace bounds a SIGTERM'd chalupa: its drain (10 s) plus its
// final replica sync (at most 30 s), plus margin.
const ChalupaStopGrace = 45 * time.Second

// FindRepoRoot walks up from the working directory to the go.mod of
// github.com/chalupa-run/chalupa.
func FindRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 64 {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/chalupa-run/chalupa\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("not inside the chalupa module (run from the repository, or pass -chalupa-bin)")
}

// BuildChalupa runs `CGO_ENABLED=0 go build -o tmp/chalupa .` in the
// repository root and returns the binary's path: the full binary (a
// release's chalupad), under the name the tools have always used.
func BuildChalupa(ctx context.Context, root string) (string, error) {
	out := filepath.Join(root, "tmp", "chalupa")
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(bctx, "go", "build", "-o", out, ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build chalupa: %v\n%s", err, b)
	}
	return out, nil
}

// StartOptions adjusts StartChalupa.
type StartOptions struct {
	// CPUs, when not empty, runs the server under `taskset -c CPUs`.
	CPUs []int
	// Args are added after `serve` (e.g. "--max-connections=1000").
	Args []string
	// Env is added to the server's environment (after the generated
	// secrets and BenchmarkQuotaEnv, so it may override them).
	Env []string
	// DefaultQuotas leaves out BenchmarkQuotaEnv: the server runs with
	// the documented quotas, as an operator's does (contrib/diskfill).
	DefaultQuotas bool
}

// BenchmarkQuotaEnv sets every ingest quota to 0 (unlimited): the servers
// the measurement tools start are measured at rates far beyond an honest
// fleet's, and no figure may measure 429s (docs/operations.md, "Quotas").
// StartChalupa applies it before StartOptions.Env; the tools print it.
var BenchmarkQuotaEnv = []string{
	"CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE=0",
	"CHALUPA_QUOTA_HEARTBEAT_BURST=0",
	"CHALUPA_QUOTA_OPEN_SESSIONS=0",
	"CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS=0",
	"CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE=0",
	"CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES=0",
	"CHALUPA_QUOTA_TELEMETRY_PER_MINUTE=0",
	"CHALUPA_QUOTA_TELEMETRY_BURST=0",
	"CHALUPA_QUOTA_ENVIRONMENT_TELEMETRY_PER_MINUTE=0",
	"CHALUPA_QUOTA_LIFECYCLE_PER_MINUTE=0",
	"CHALUPA_QUOTA_LIFECYCLE_BURST=0",
	"CHALUPA_QUOTA_ENVIRONMENT_LIFECYCLE_PER_MINUTE=0",
	"CHALUPA_QUOTA_RUNS_PER_MINUTE=0",
	"CHALUPA_QUOTA_RUN_BURST=0",
	"CHALUPA_QUOTA_ENVIRONMENT_RUNS_PER_MINUTE=0",
	"CHALUPA_QUOTA_ARTIFACT_KIB_PER_MINUTE=0",
	"CHALUPA_QUOTA_ARTIFACT_KIB_BURST=0",
	"CHALUPA_QUOTA_ENVIRONMENT_ARTIFACT_KIB_PER_MINUTE=0",
	"CHALUPA_QUOTA_LOG_REQUESTS_PER_MINUTE=0",
	"CHALUPA_QUOTA_LOG_BURST=0",
	"CHALUPA_QUOTA_ENVIRONMENT_LOG_REQUESTS_PER_MINUTE=0",
}

// ChalupaDataDirName is the CHALUPA_DATA_DIR StartChalupa gives the
// server, under its dir: a tool may seed the database there first.
const ChalupaDataDirName = "chalupa-data"

// Chalupa is a running `chalupa serve`.
type Chalupa struct {
	*Server
	// DataDir is its CHALUPA_DATA_DIR; the database is DBPath.
	DataDir string
	// ReadyToken reads /metrics and /api/ready.
	ReadyToken string
	// Admin is an admin API client with the admin token.
	Admin *adminapi.Client
}

// DBPath is the SQLite file; its WAL is DBPath()+"-wal".
func (t *Chalupa) DBPath() string { return filepath.Join(t.DataDir, DatabaseFileName) }

// DatabaseFileName is daemon.DatabaseFileName, the SQLite file in the data
// dir (a test keeps the two equal; importing the daemon here would build all
// of it into every tool).
const DatabaseFileName = "chalupa.db"

// StartChalupa runs `chalupa serve` with a data dir under dir, on a free
// loopback port, with secrets this tool generates (so nothing is read from
// or written to the caller's environment), and waits for /api/health.
func StartChalupa(ctx context.Context, bin, dir string, opt StartOptions) (*Chalupa, error) {
	addr, err := FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	master := make([]byte, 32)
	_, _ = rand.Read(master)
	readyToken := RandomToken(32)
	adminToken := RandomToken(32)
	dataDir := filepath.Join(dir, ChalupaDataDirName)
	logPath := filepath.Join(dir, "chalupa.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd, err := Command(opt.CPUs, bin, append([]string{"serve"}, opt.Args...)...)
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.Dir = dir
	cmd.Env = append(BaseEnv(),
		"CHALUPA_DATA_DIR="+dataDir,
		"CHALUPA_LISTEN="+addr,
		"CHALUPA_ADMIN_TOKEN="+adminToken,
		"CHALUPA_READY_TOKEN="+readyToken,
		"CHALUPA_INGEST_MASTER_KEY="+base64.StdEncoding.EncodeToString(master),
	)
	if !opt.DefaultQuotas {
		cmd.Env = append(cmd.Env, BenchmarkQuotaEnv...)
	}
	cmd.Env = append(cmd.Env, opt.Env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start chalupa: %w", err)
	}
	s := NewServer("chalupa", cmd, logf, logPath)
	s.URL = "http://" + addr
	if err := s.WaitHealthy(ctx, 60*time.Second); err != nil {
		s.Stop(ChalupaStopGrace)
		return nil, err
	}
	t := &Chalupa{Server: s, DataDir: dataDir, ReadyToken: readyToken}
	if err := t.checkAdmin(ctx, adminToken); err != nil {
		s.Stop(ChalupaStopGrace)
		return nil, err
	}
	return t, nil
}

func (t *Chalupa) checkAdmin(ctx context.Context, adminToken string) error {
	cl := &adminapi.Client{BaseURL: t.URL, Token: adminToken, HTTP: &http.Client{Timeout: 30 * time.Second}}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cl.GetStatus(cctx); err != nil {
		return fmt.Errorf("chalupa admin status: %w", err)
	}
	t.Admin = cl
	return nil
}

// IssueKey creates environment slug and issues an ingest key for it.
func (t *Chalupa) IssueKey(ctx context.Context, slug string) (keyID string, key []byte, err error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := t.Admin.CreateEnvironment(cctx, adminapi.CreateEnvironmentRequest{Slug: slug, Name: "load test"}); err != nil {
		return "", nil, fmt.Errorf("create environment: %w", err)
	}
	return t.IssueKeyExisting(cctx, slug)
}

// IssueKeyExisting issues an ingest key for environment slug, which exists
// already (a tool seeded it into the database before the server started).
func (t *Chalupa) IssueKeyExisting(ctx context.Context, slug string) (keyID string, key []byte, err error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	k, err := t.Admin.IssueIngestKey(cctx, slug)
	if err != nil {
		return "", nil, fmt.Errorf("issue key: %w", err)
	}
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		return "", nil, err
	}
	return k.KeyID, raw, nil
}

// WriterStats reads chalupa_writer_commits_total and
// chalupa_writer_units_total from /metrics (ready token as bearer).
func (t *Chalupa) WriterStats(ctx context.Context) (commits, units float64, err error) {
	m, err := t.Metrics(ctx)
	if err != nil {
		return 0, 0, err
	}
	return WriterStatsOf(m)
}

// WriterStatsOf picks chalupa_writer_commits_total and
// chalupa_writer_units_total out of ParseMetrics' result.
func WriterStatsOf(m map[string]float64) (commits, units float64, err error) {
	commits, ok1 := m["chalupa_writer_commits_total"]
	units, ok2 := m["chalupa_writer_units_total"]
	if !ok1 || !ok2 {
		return 0, 0, errors.New("/metrics has no chalupa_writer_commits_total / chalupa_writer_units_total")
	}
	return commits, units, nil
}

// Metrics reads /metrics (ready token as bearer) and returns every series
// without labels ("go_goroutines", "process_open_fds", …) by name. Each call
// is one request to the server: a measurement of an idle server reads it
// only outside its window.
func (t *Chalupa) Metrics(ctx context.Context) (map[string]float64, error) {
	text, err := t.MetricsText(ctx)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(text)
}

// ParseMetrics returns every series without labels of a Prometheus text
// exposition by name.
func ParseMetrics(text string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /metrics: %w", err)
	}
	return out, nil
}

// MetricsText reads /metrics (ready token as bearer) and returns the whole
// text exposition: one request to the server.
func (t *Chalupa) MetricsText(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, t.URL+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+t.ReadyToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("read /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("read /metrics: HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return "", fmt.Errorf("read /metrics: %w", err)
	}
	return string(b), nil
}

// maxMetricsBytes bounds what MetricsText reads: chalupa's exposition is a
// few tens of KiB.
const maxMetricsBytes = 8 << 20
