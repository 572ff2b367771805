package daemon_test

import (
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
)

// TestEveryRouteIsBehindItsGroupsAuth walks every registered route and
// asserts that its group's authentication refuses a request without
// credentials, and one carrying another group's credentials: the admin
// bearer and the ready token are not interchangeable, and neither opens a
// signed route. Only GET /api/health is public.
func TestEveryRouteIsBehindItsGroupsAuth(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	admin, ready := p.Env[daemontest.AdminTokenVar], p.Env[daemontest.ReadyTokenVar]
	param := regexp.MustCompile(`:[A-Za-z]+`)
	hc := &http.Client{}
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
				other := http.MethodPut
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
	for _, g := range []string{daemon.GroupPublic, daemon.GroupProbe, daemon.GroupAdmin, daemon.GroupIngest} {
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
	admin, ready := p.Env[daemontest.AdminTokenVar], p.Env[daemontest.ReadyTokenVar]
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
