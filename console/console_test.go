package console

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
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
