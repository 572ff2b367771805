package agentrelease

import (
	"errors"
	"strings"
	"testing"
)

func TestReleaseCheck(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	good := map[string]string{EnvVersion: "v1.2.3", EnvReleaseURL: "https://releases.example/chalupa/v1.2.3/", EnvSHA256AMD64: sha, EnvSHA256ARM64: sha}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // the variable named, "" for none
	}{
		{"good", good, ""},
		{"latest", with(EnvVersion, "latest"), EnvVersion},
		{"branch", with(EnvVersion, "main"), EnvVersion},
		{"plain http", with(EnvReleaseURL, "http://releases.example/v1.2.3"), EnvReleaseURL},
		{"query", with(EnvReleaseURL, "https://releases.example/download?tag=latest"), EnvReleaseURL},
		{"credentials", with(EnvReleaseURL, "https://user:pw@releases.example/v1.2.3"), EnvReleaseURL},
		{"missing amd64 digest", with(EnvSHA256AMD64, ""), EnvSHA256AMD64},
		{"upper-case arm64 digest", with(EnvSHA256ARM64, strings.ToUpper(sha)), EnvSHA256ARM64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := FromEnv(func(k string) string { return tc.env[k] }).Check()
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("Check = %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("Check = %v, want one problem naming %s", errs, tc.want)
			}
			var p Problem
			if !errors.As(errs[0], &p) || p.Var != tc.want {
				t.Fatalf("Check = %v, want a Problem naming %s", errs, tc.want)
			}
			if v := tc.env[tc.want]; v != "" && strings.Contains(errs[0].Error(), v) {
				t.Fatalf("the problem carries the value: %v", errs[0])
			}
		})
	}
	if errs := FromEnv(func(string) string { return "" }).Check(); len(errs) != 1 || errs[0] != ErrNotConfigured {
		t.Fatalf("nothing set: Check = %v, want ErrNotConfigured", errs)
	}
}

func TestArchiveURL(t *testing.T) {
	r := FromEnv(func(k string) string {
		return map[string]string{EnvVersion: "v1.2.3", EnvReleaseURL: "https://r.example/v1.2.3/"}[k]
	})
	if got, want := r.ArchiveURL("arm64"), "https://r.example/v1.2.3/chalupa-agent_v1.2.3_linux_arm64.tar.gz"; got != want {
		t.Fatalf("ArchiveURL = %q, want %q", got, want)
	}
}
