package origin

import (
	"strings"
	"testing"
)

func TestIsLoopbackHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"localhost", true}, {"LOCALHOST", true}, {"127.0.0.1", true}, {"127.9.8.7", true},
		{"::1", true}, {"[::1]", true}, {"::ffff:127.0.0.1", true},
		{"", false}, {"0.0.0.0", false}, {"10.0.0.1", false}, {"example.com", false}, {"localhost.example.com", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			if got := IsLoopbackHost(tc.host); got != tc.want {
				t.Errorf("IsLoopbackHost(%q) = %v, want %v", tc.host, got, tc.want)
			}
		})
	}
}

// TestCheckDaemonURL: the admin bearer (or any secret a client sends) goes over https anywhere, over plain
// http only to loopback, and only to an origin without user info, path,
// query or fragment.
func TestCheckDaemonURL(t *testing.T) {
	checkAdminURL := func(u string) error { return CheckDaemonURL("--url", "the admin token", u) }
	ok := []string{
		"http://127.0.0.1:8080", "http://127.0.0.1:8080/", "http://127.9.9.9", "http://localhost:8080",
		"http://LOCALHOST", "http://[::1]:8080", "http://[::ffff:127.0.0.1]:8080",
		"https://chalupa.example.com", "https://203.0.113.7:8443/",
	}
	for _, u := range ok {
		t.Run(u, func(t *testing.T) {
			if err := checkAdminURL(u); err != nil {
				t.Errorf("CheckDaemonURL(%q) = %v, want nil", u, err)
			}
		})
	}
	bad := map[string]string{
		"http://203.0.113.7:8080":              "plain http",
		"http://chalupa.example.com":           "plain http",
		"http://localhost.example.com":         "plain http",
		"http://[::2]:8080":                    "plain http",
		"http://128.0.0.1":                     "plain http",
		"http://0.0.0.0:8080":                  "plain http",
		"http://user:hunter2@127.0.0.1:8080":   "user info",
		"https://user@chalupa.example.com":     "user info",
		"https://chalupa.example.com/chalupa":  "no path",
		"http://127.0.0.1:8080/api":            "no path",
		"http://127.0.0.1:8080?x=1":            "no path, query",
		"http://127.0.0.1:8080/?":              "no path, query",
		"https://chalupa.example.com/#x":       "no path, query",
		"ftp://127.0.0.1":                      "must be http",
		"127.0.0.1:8080":                       "must be http",
		"http:///api":                          "must be http",
		"":                                     "must be http",
		"https://chalupa.example.com:notaport": "must be http",
	}
	for u, want := range bad {
		t.Run(u, func(t *testing.T) {
			err := checkAdminURL(u)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("CheckDaemonURL(%q) = %v, want an error containing %q", u, err, want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("CheckDaemonURL(%q) repeats the password: %v", u, err)
			}
		})
	}
}
