package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
)

// TestEveryRouteIsBehindItsGroupsAuth walks every registered route and
// asserts that its group's authentication refuses a request without
// credentials, and one carrying another group's credentials: the admin
// bearer and the ready token are not interchangeable, and neither opens a
// signed route. Only GET /api/health is public.
func TestEveryRouteIsBehindItsGroupsAuth(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	admin, ready := p.Env[proctest.AdminTokenVar], p.Env[proctest.ReadyTokenVar]
	param := regexp.MustCompile(`:[A-Za-z]+`)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	routes := p.App.Server.Routes()
	if len(routes) < 4+len(adminapi.Operations)/2 {
		t.Fatalf("only %d routes registered", len(routes))
	}
	groups := map[string]int{}
	for _, rt := range routes {
		groups[rt.Group]++
		t.Run(rt.Method+" "+rt.Pattern, func(t *testing.T) {
			path := param.ReplaceAllString(rt.Pattern, "x")
			send := func(method, bearer string) (code int, allow string) {
				req, err := http.NewRequest(method, p.URL+path, strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				if bearer != "" {
					req.Header.Set("Authorization", "Bearer "+bearer)
				}
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				return resp.StatusCode, resp.Header.Get("Allow")
			}
			var wrong []string
			switch rt.Group {
			case daemon.GroupPublic:
				if rt.Pattern != "/api/health" {
					t.Fatalf("%s is public; only /api/health may be", rt.Pattern)
				}
				return
			case daemon.GroupProbe:
				wrong = []string{"", admin}
			case daemon.GroupAdmin:
				wrong = []string{"", ready}
			case daemon.GroupIngest:
				wrong = []string{"", admin, ready}
			case daemon.GroupConsole:
				// The console's own session guards /app and /logout; a
				// bearer never opens them. Its other routes are the
				// landing page, robots.txt, assets and the login form.
				if !strings.HasPrefix(rt.Pattern, "/app") && rt.Pattern != "/logout" {
					return
				}
				for _, b := range []string{"", admin, ready} {
					code, _ := send(rt.Method, b)
					if want := map[string]int{"GET": http.StatusSeeOther, "HEAD": http.StatusSeeOther, "POST": http.StatusForbidden}[rt.Method]; code != want {
						t.Errorf("with bearer %q: %d, want %d", redact(b, admin, ready), code, want)
					}
				}
				return
			default:
				t.Fatalf("route in unknown group %q", rt.Group)
			}
			for _, b := range wrong {
				if code, _ := send(rt.Method, b); code != http.StatusUnauthorized {
					t.Errorf("with bearer %q: %d, want 401", redact(b, admin, ready), code)
				}
			}
			// A wrong method says nothing about the route (405, Allow)
			// before the bearer groups have authenticated the caller.
			if rt.Group == daemon.GroupAdmin || rt.Group == daemon.GroupProbe {
				// A method this path does not serve (PATCH serves box
				// updates; PUT and DELETE the provider-token route).
				other := unservedMethod(routes, rt.Pattern)
				if code, allow := send(other, ""); code != http.StatusUnauthorized || allow != "" {
					t.Errorf("%s without credentials: %d with Allow %q, want 401 and no Allow", other, code, allow)
				}
				good := admin
				if rt.Group == daemon.GroupProbe {
					good = ready
				}
				if code, allow := send(other, good); code != http.StatusMethodNotAllowed || allow == "" {
					t.Errorf("%s with the group's bearer: %d with Allow %q, want 405 with Allow", other, code, allow)
				}
			}
		})
	}
	for _, g := range []string{daemon.GroupPublic, daemon.GroupProbe, daemon.GroupAdmin, daemon.GroupIngest, daemon.GroupConsole} {
		if groups[g] == 0 {
			t.Errorf("no route in group %s", g)
		}
	}
}

func redact(b, admin, ready string) string {
	switch b {
	case admin:
		return "admin token"
	case ready:
		return "ready token"
	}
	return b
}

// TestEveryOperationIsServed: every operation of the table is routed (an
// admin route at its method and path exists) — the accounting's server
// side; the daemon refuses to start otherwise (TestOperationsRefuseGaps).
func TestEveryOperationIsServed(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	routed := map[string]string{}
	for _, rt := range p.App.Server.Routes() {
		routed[rt.Method+" "+rt.Pattern] = rt.Group
	}
	for _, op := range adminapi.Operations {
		t.Run(op.ID, func(t *testing.T) {
			if g := routed[op.Method+" "+op.Path]; g != daemon.GroupAdmin {
				t.Errorf("%s %s is routed in group %q, want %q", op.Method, op.Path, g, daemon.GroupAdmin)
			}
		})
	}
}

// TestAllowListsOnlyServedMethods: a 405's Allow header names exactly the
// methods registered for the path. httprouter appends OPTIONS, but OPTIONS
// is not answered (HandleOPTIONS is off: no CORS), so offering it would be
// a lie; an OPTIONS request is itself a 405 whose Allow omits OPTIONS.
func TestAllowListsOnlyServedMethods(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	admin, ready := p.Env[proctest.AdminTokenVar], p.Env[proctest.ReadyTokenVar]
	param := regexp.MustCompile(`:[A-Za-z]+`)
	served := map[string][]string{}
	groupOf := map[string]string{}
	for _, rt := range p.App.Server.Routes() {
		served[rt.Pattern] = append(served[rt.Pattern], rt.Method)
		groupOf[rt.Pattern] = rt.Group
	}
	for pattern, methods := range served {
		sort.Strings(methods)
		want := strings.Join(methods, ", ")
		bearer := map[string]string{daemon.GroupAdmin: admin, daemon.GroupProbe: ready}[groupOf[pattern]]
		for _, method := range []string{http.MethodOptions, http.MethodPut, http.MethodDelete} {
			if slices.Contains(methods, method) {
				continue
			}
			req, err := http.NewRequest(method, p.URL+param.ReplaceAllString(pattern, "x"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if bearer != "" {
				req.Header.Set("Authorization", "Bearer "+bearer)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != want {
				t.Errorf("%s %s: %d with Allow %q, want 405 with Allow %q", method, pattern, resp.StatusCode, resp.Header.Get("Allow"), want)
			}
		}
	}
}

// TestOversizeHeadersAnswerJSON runs daemon.Run (the real http.Server
// settings) and sends requests with oversize headers over raw TCP. Above
// chalupa's 32 KiB bound the router answers 431 headers_too_large as JSON
// with a request id, whatever the route and before any authentication;
// only far beyond it does net/http refuse by itself, in plain text, before
// chalupa sees the request (docs/operations.md, "HTTP surface and errors").
func TestOversizeHeadersAnswerJSON(t *testing.T) {
	env := proctest.NewSecrets()
	env["CHALUPA_DATA_DIR"] = t.TempDir()
	env["CHALUPA_LISTEN"] = "127.0.0.1:0"
	cfg, err := daemon.LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, cfg, daemon.RunOptions{Logs: io.Discard, Listening: func(a string) { addr <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var base string
	select {
	case base = <-addr:
	case err := <-done:
		t.Fatalf("Run exited: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("Run did not listen within a minute")
	}
	send := func(method, path string, pad int) (*http.Response, []byte) {
		t.Helper()
		c, err := net.Dial("tcp", base)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nX-Pad: %s\r\nConnection: close\r\n\r\n", method, path, base, strings.Repeat("a", pad))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	for _, tc := range []struct{ method, path string }{
		{"GET", "/api/health"}, {"POST", "/api/admin/environments"}, {"GET", "/metrics"},
		{"POST", "/api/ingest/heartbeat"}, {"GET", "/no/such/route"}, {"DELETE", "/api/health"},
	} {
		for _, pad := range []int{33 << 10, 40 << 10} {
			resp, body := send(tc.method, tc.path, pad)
			var e adminapi.ErrorBody
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || json.Unmarshal(body, &e) != nil || e.Error.Code != "headers_too_large" ||
				resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s %s with %d KiB of headers: %d %v %s, want 431 headers_too_large as JSON with X-Request-Id", tc.method, tc.path, pad>>10, resp.StatusCode, resp.Header, body)
			}
		}
	}
	// Within the bound the request is served as usual.
	if resp, body := send("GET", "/api/health", 31<<10); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/health with 31 KiB of headers: %d %s, want 200", resp.StatusCode, body)
	}
	// Beyond net/http's own bound, Go answers before any handler runs.
	if resp, _ := send("GET", "/api/health", 80<<10); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("X-Request-Id") != "" {
		t.Errorf("GET /api/health with 80 KiB of headers: %d %v, want net/http's plain 431", resp.StatusCode, resp.Header)
	}
}

// TestCommitDelayIsMeasured: a write's wait for the replica shows in
// chalupa_replication_commit_delay_seconds once it is confirmed.
func TestCommitDelayIsMeasured(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	if _, err := p.Admin.CreateEnvironment(t.Context(), adminapi.CreateEnvironmentRequest{Slug: "delay-1"}); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^chalupa_replication_commit_delay_seconds_count ([0-9]+)$`)
	testwait.Eventually(t, testwait.Short, "a commit delay observation", func() (bool, string) {
		req, _ := http.NewRequest("GET", p.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+p.Env[proctest.ReadyTokenVar])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := re.FindSubmatch(b)
		return m != nil && string(m[1]) != "0", fmt.Sprintf("%d, %q", resp.StatusCode, m)
	})
}

// unservedMethod returns a method none of routes serves on pattern.
func unservedMethod(routes []daemon.Route, pattern string) string {
	for _, m := range []string{http.MethodPatch, http.MethodPut, http.MethodDelete, http.MethodPost, http.MethodGet} {
		served := false
		for _, rt := range routes {
			served = served || (rt.Pattern == pattern && rt.Method == m)
		}
		if !served {
			return m
		}
	}
	panic("every method is served on " + pattern)
}
