package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
)

// TestMCPSignalMidCall: SIGINT or SIGTERM while `chalupa mcp` waits on
// the daemon for a tool call stops it cleanly — exit 0, nothing on
// stderr — as a long-running command stopped by a signal does
// (docs/operations.md, "Exit codes"); the call's request is cancelled
// rather than waited for. Before, it exited 1 with "context canceled"
// once the call's timeout had passed.
func TestMCPSignalMidCall(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			// A daemon that never answers: the call waits until cancelled.
			d := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-r.Context().Done()
			}))
			t.Cleanup(d.Close)
			t.Cleanup(d.CloseClientConnections)
			var stdout, stderr proctest.SyncBuffer
			cmd := exec.Command(bin, "mcp", "--timeout", "1h")
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "CHALUPA_ADMIN_TOKEN=test-token", "CHALUPA_URL=" + d.URL}
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			io.WriteString(in, strings.Join([]string{
				`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
				`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
				`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"chalupa_admin_get_status","arguments":{}}}`,
			}, "\n")+"\n")
			testwait.Eventually(t, testwait.Long, "the call reaching the daemon", func() (bool, string) {
				select {
				case <-arrived:
					return true, ""
				default:
					return false, stdout.String() + stderr.String()
				}
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 0 || stderr.String() != "" {
				t.Fatalf("exit %d after %v mid-call, want 0 and nothing on stderr:\n%s", code, sig, stderr.String())
			}
		})
	}
}
