package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

// The agent's command-line checks, on the built binary: the agent's
// commands write to the process's own streams, so they run as a process
// until they take injected ones.

// TestAgentRefusesUnsafeURLAndKeyFile: the agent sends fleet data, so the
// daemon URL follows the admin CLI's rules (an origin; https unless
// loopback; exit 2 with the usage line, as for admin), and a key file that
// is missing or others can read is refused (exit 1) before any request.
func TestAgentRefusesUnsafeURLAndKeyFile(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	dir, key := agentKeyFile(t)
	args := func(url, keyFile string) []string {
		return []string{"agent", "heartbeat", "--url", url, "--key-id", "env_x_0000000000000000", "--key-file", keyFile, "--env", "x1", "--deployment", "d1"}
	}
	for url, want := range map[string]string{
		"http://chalupa.example.net":  "plain http",
		"http://127.0.0.1:9/api":      "origin",
		"https://u:p@chalupa.example": "user info",
	} {
		out, code := proctest.RunCommand(t, bin, "", nil, args(url, key)...)
		if code != exitUsage || !strings.Contains(out, want) || !strings.Contains(out, "usage: chalupa agent heartbeat") {
			t.Errorf("agent --url %s: exit %d, want %d mentioning %q with the usage line:\n%s", url, code, exitUsage, want, out)
		}
	}
	// A key file that is not there is a refusal about the disk, exit 1 like
	// a missing --activity-file, not a usage mistake.
	missing := filepath.Join(dir, "no-such.key")
	if out, code := proctest.RunCommand(t, bin, "", nil, args("http://127.0.0.1:9", missing)...); code != 1 || !strings.Contains(out, "--key-file") || !strings.Contains(out, "no such file") {
		t.Errorf("agent with a missing key file: exit %d, want 1 naming --key-file:\n%s", code, out)
	}
	loose := filepath.Join(dir, "loose.key")
	if err := os.WriteFile(loose, []byte(protocol.NewKeyMaterial()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := proctest.RunCommand(t, bin, "", nil, args("http://127.0.0.1:9", loose)...)
	if code != 1 || !strings.Contains(out, "chmod 600") {
		t.Errorf("agent with a 0644 key file: exit %d:\n%s", code, out)
	}
}

// TestAgentActivityFile: --activity-file names the file whose mtime is the
// last user activity. A file that does not exist is refused at start (exit
// 1, nothing sent) instead of silently counting from the agent's start; one
// that disappears while the agent runs is warned about once on stderr, and
// the last activity seen keeps being reported (never the start time, which
// could be later than it).
func TestAgentActivityFile(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	dir, key := agentKeyFile(t)
	activity := filepath.Join(dir, "activity")
	if err := os.WriteFile(activity, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	seen := time.Now().Add(-7 * time.Minute).Truncate(time.Second)
	if err := os.Chtimes(activity, seen, seen); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported []time.Time
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var hb struct {
			Reaper struct {
				LastActivityAt time.Time `json:"lastActivityAt"`
			} `json:"reaper"`
		}
		_ = json.NewDecoder(r.Body).Decode(&hb)
		mu.Lock()
		reported = append(reported, hb.Reaper.LastActivityAt)
		if len(reported) == 1 {
			_ = os.Remove(activity) // gone after the first heartbeat
		}
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"accepted":true}`)
	}))
	defer ts.Close()
	args := func(activityFile string, extra ...string) []string {
		return append([]string{"agent", "heartbeat", "--url", ts.URL, "--key-id", "env_x1_0000000000000000", "--key-file", key,
			"--env", "x1", "--deployment", "d1", "--activity-file", activityFile}, extra...)
	}

	missing := filepath.Join(dir, "no-such-file")
	out, code := proctest.RunCommand(t, bin, "", nil, args(missing)...)
	if code != 1 || !strings.Contains(out, "--activity-file") || !strings.Contains(out, "no such file") {
		t.Errorf("agent --activity-file naming no file: exit %d, want 1 naming the flag:\n%s", code, out)
	}
	mu.Lock()
	if len(reported) != 0 {
		t.Fatalf("the refused agent sent %d heartbeats", len(reported))
	}
	mu.Unlock()

	out, code = proctest.RunCommand(t, bin, "", nil, args(activity, "--every", "20ms", "--count", "3")...)
	if code != 0 {
		t.Fatalf("agent with an activity file removed mid-run: exit %d:\n%s", code, out)
	}
	if n := strings.Count(out, "--activity-file"); n != 1 {
		t.Errorf("the vanished activity file was reported %d times, want once:\n%s", n, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 3 {
		t.Fatalf("%d heartbeats sent, want 3", len(reported))
	}
	for i, got := range reported {
		if !got.Equal(seen) {
			t.Errorf("heartbeat %d reported last activity %s, want the file's mtime %s", i+1, got, seen)
		}
	}
}
