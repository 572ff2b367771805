package console

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

func TestSource(t *testing.T) {
	trusted, err := ParseTrustedProxies("10.0.0.0/8, 192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, remote, xff string
		trusted           []netip.Prefix
		want              string
	}{
		{"no proxies: the connection", "203.0.113.9:5000", "198.51.100.1", nil, "203.0.113.9"},
		{"untrusted peer: XFF ignored", "203.0.113.9:5000", "198.51.100.1", trusted, "203.0.113.9"},
		{"trusted peer: right-most untrusted hop", "10.1.2.3:443", "1.1.1.1, 198.51.100.1, 10.9.9.9", trusted, "198.51.100.1"},
		{"trusted peer, no XFF", "192.0.2.1:443", "", trusted, "192.0.2.1"},
		{"garbage hop stops the walk", "10.1.2.3:443", "198.51.100.1, nonsense", trusted, "10.1.2.3"},
		{"IPv4-mapped IPv6", "[::ffff:203.0.113.9]:1", "", nil, "203.0.113.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/login", nil)
			r.RemoteAddr = tc.remote
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			if got := Source(r, tc.trusted); got != tc.want {
				t.Errorf("Source = %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := ParseTrustedProxies("10.0.0.1, example.com"); err == nil {
		t.Error("a host name was accepted as a trusted proxy")
	}
}

func TestPasswordHash(t *testing.T) {
	h, err := HashPassword("twelve chars ok")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q: want argon2id with its parameters", h)
	}
	for _, tc := range []struct {
		name, pw string
		ok       bool
	}{
		{"right", "twelve chars ok", true},
		{"wrong", "twelve chars OK", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := VerifyPassword(h, tc.pw); got != tc.ok {
				t.Errorf("VerifyPassword = %v, want %v", got, tc.ok)
			}
		})
	}
	h2, _ := HashPassword("twelve chars ok")
	if h2 == h {
		t.Error("two hashes of one password are equal: no salt")
	}
	for _, tc := range []struct {
		pw   string
		want error
	}{
		{"short", ErrPasswordTooShort},
		{strings.Repeat("x", MaxPasswordBytes+1), ErrPasswordTooLong},
		{"twelve chars\nok", ErrPasswordInvalid},
	} {
		if _, err := HashPassword(tc.pw); err != tc.want {
			t.Errorf("HashPassword(%.10q…) = %v, want %v", tc.pw, err, tc.want)
		}
	}
	if VerifyPassword("$argon2id$v=19$m=1,t=1,p=1$$", "x") {
		t.Error("a malformed hash matched")
	}
}

// TestReplicationWarning: every signed-in page says when replication fails
// or lags past half its limit, in words (not colour alone), and is quiet
// otherwise; the public pages (/ and /login, fetched through the console's
// routes without a session) show neither the warning nor the build version
// nor the replica's type (docs/operations.md, "Console").
func TestReplicationWarning(t *testing.T) {
	db := storagetest.NewDB(t)
	for _, tc := range []struct {
		name string
		h    storage.ReplicationHealth
		want string
	}{
		{"healthy", storage.ReplicationHealth{Kind: "s3", LagSeconds: 1, LagLimitSeconds: 120}, ""},
		{"lagging", storage.ReplicationHealth{Kind: "s3", LagSeconds: 90, LagLimitSeconds: 120}, "Replication lags 90 s (limit 120 s)."},
		{"failing", storage.ReplicationHealth{Kind: "s3", LagSeconds: 300, LagLimitSeconds: 120, Failing: true, LastError: "unreachable"},
			"Replication is failing: the replica lags 300 s (limit 120 s); last error: unreachable."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Deps{DB: db, Version: "v9.9.9", Origin: "http://127.0.0.1:8080",
				Replication: func(time.Time) storage.ReplicationHealth { return tc.h }})
			router := httprouter.New()
			for _, rt := range c.Routes() {
				router.HandlerFunc(rt.Method, rt.Pattern, rt.Handler)
			}
			for _, path := range []string{"/login", "/"} {
				rec := httptest.NewRecorder()
				router.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
				body := rec.Body.String()
				if rec.Code != http.StatusOK || !strings.Contains(body, "</html>") {
					t.Fatalf("GET %s: %d\n%s", path, rec.Code, body)
				}
				for _, leak := range []string{"v9.9.9", `id="version"`, "replica s3", "eplication", `role="alert"`, "lags", "unreachable"} {
					if strings.Contains(body, leak) {
						t.Errorf("GET %s without a session shows %q:\n%s", path, leak, body)
					}
				}
			}
			_, body := pageOf(t, c.page(c.landing), "/")
			has := strings.Contains(body, `role="alert"`)
			if has != (tc.want != "") || (tc.want != "" && !strings.Contains(body, tc.want)) {
				t.Errorf("signed in: warning shown %v, want %q:\n%s", has, tc.want, body)
			}
			if !strings.Contains(body, `<span id="version">v9.9.9</span>`) {
				t.Errorf("signed in: no build version:\n%s", body)
			}
		})
	}
}

// TestCookieFlagsByOrigin: off loopback http the session cookie is Secure
// with the __Host- prefix; on a loopback http origin it cannot be Secure.
func TestCookieFlagsByOrigin(t *testing.T) {
	for _, tc := range []struct {
		origin, name string
		secure       bool
	}{
		{"https://chalupa.example.com", "__Host-chalupa_session", true},
		{"http://127.0.0.1:8080", "chalupa_session", false},
	} {
		t.Run(tc.origin, func(t *testing.T) {
			c := New(Deps{Origin: tc.origin})
			rec := httptest.NewRecorder()
			c.setCookie(rec, c.cookie, "v", 0)
			ck := rec.Result().Cookies()[0]
			if ck.Name != tc.name || ck.Secure != tc.secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" {
				t.Fatalf("cookie %+v", ck)
			}
		})
	}
}
