package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/ingest/signer"
)

// chalupaStopGrace bounds a SIGTERM'd chalupa: its drain (10 s) plus its
// final replica sync (at most 30 s), plus margin.
const chalupaStopGrace = 45 * time.Second

// findRepoRoot walks up from the working directory to the go.mod of
// github.com/chalupa-run/chalupa.
func findRepoRoot() (string, error) {
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

// buildChalupa runs `CGO_ENABLED=0 go build -o tmp/chalupa .` in the
// repository root and returns the binary's path.
func buildChalupa(ctx context.Context, root string) (string, error) {
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

// chalupaTarget is a running `chalupa serve` with an environment and a key.
type chalupaTarget struct {
	*server
	readyToken string
	admin      *adminapi.Client
}

// startChalupa runs `chalupa serve` with a data dir under dir, on a free
// loopback port, with secrets this tool generates (so nothing is read from
// or written to the caller's environment), and waits for /api/health.
func startChalupa(ctx context.Context, bin, dir string) (*chalupaTarget, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	master := make([]byte, 32)
	_, _ = rand.Read(master)
	readyToken := randomToken(32)
	adminToken := randomToken(32)
	dataDir := filepath.Join(dir, "chalupa-data")
	logPath := filepath.Join(dir, "chalupa.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve")
	cmd.Dir = dir
	cmd.Env = append(baseEnv(),
		"CHALUPA_DATA_DIR="+dataDir,
		"CHALUPA_LISTEN="+addr,
		"CHALUPA_ADMIN_TOKEN="+adminToken,
		"CHALUPA_READY_TOKEN="+readyToken,
		"CHALUPA_INGEST_MASTER_KEY="+base64.StdEncoding.EncodeToString(master),
	)
	cmd.Stdout = logf
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start chalupa: %w", err)
	}
	s := newServer("chalupa", cmd, logf, logPath)
	s.url = "http://" + addr
	if err := s.waitHealthy(ctx, 60*time.Second); err != nil {
		s.stop(chalupaStopGrace)
		return nil, err
	}
	t := &chalupaTarget{server: s, readyToken: readyToken}
	if err := t.checkAdmin(ctx, adminToken); err != nil {
		s.stop(chalupaStopGrace)
		return nil, err
	}
	return t, nil
}

func (t *chalupaTarget) checkAdmin(ctx context.Context, adminToken string) error {
	cl := &adminapi.Client{BaseURL: t.url, Token: adminToken, HTTP: &http.Client{Timeout: 30 * time.Second}}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cl.GetStatus(cctx); err != nil {
		return fmt.Errorf("chalupa admin status: %w", err)
	}
	t.admin = cl
	return nil
}

// issueKey creates environment slug and issues an ingest key for it.
func (t *chalupaTarget) issueKey(ctx context.Context, slug string) (keyID string, key []byte, err error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := t.admin.CreateEnvironment(cctx, adminapi.CreateEnvironmentRequest{Slug: slug, Name: "load test"}); err != nil {
		return "", nil, fmt.Errorf("create environment: %w", err)
	}
	k, err := t.admin.IssueIngestKey(cctx, slug)
	if err != nil {
		return "", nil, fmt.Errorf("issue key: %w", err)
	}
	raw, err := signer.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		return "", nil, err
	}
	return k.KeyID, raw, nil
}

// writerStats reads chalupa_writer_commits_total and
// chalupa_writer_units_total from /metrics (ready token as bearer).
func (t *chalupaTarget) writerStats(ctx context.Context) (commits, units float64, err error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, t.url+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+t.readyToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("read /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("read /metrics: HTTP %d", resp.StatusCode)
	}
	commits, units = -1, -1
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "chalupa_writer_commits_total":
			commits, _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
		case "chalupa_writer_units_total":
			units, _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("read /metrics: %w", err)
	}
	if commits < 0 || units < 0 {
		return 0, 0, errors.New("/metrics has no chalupa_writer_commits_total / chalupa_writer_units_total")
	}
	return commits, units, nil
}
